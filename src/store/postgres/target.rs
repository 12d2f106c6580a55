//! Where and how to connect: the URL parsed into a `tokio_postgres::Config`, plus the
//! TLS connector its `sslmode` asks for.
//!
//! tokio-postgres parses libpq URLs, several hosts and `target_session_attrs` included,
//! but knows only `sslmode=disable|prefer|require` and never verifies certificates
//! itself (that is the connector's job). This thin layer takes `sslmode` and
//! `sslrootcert` out of the URL and gives them libpq's meaning:
//! - `disable` (or absent): plain TCP; `prefer`: TLS when offered, unverified;
//! - `require`: TLS, certificate checked only if `sslrootcert` is given (as libpq);
//! - `verify-ca`, `verify-full`: TLS, certificate and host name checked against
//!   `sslrootcert` or the system's roots (`verify-ca` is held to `verify-full`).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Used when the URL sets no `connect_timeout`: a dead host of a multi-host URL must
/// not hold up trying the next one for long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A parsed connection target.
#[derive(Clone)]
pub struct Target {
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: Option<MakeRustlsConnect>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Verify {
    None,
    Full,
}

impl Target {
    /// Parses a libpq-style URL (`postgres://user:pw@h1:5432,h2:5432/db?...`).
    pub fn parse(url: &str) -> Result<Target, String> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        let (mut mode, mut root_cert) = ("disable".to_string(), None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode_str(v).decode_utf8_lossy().into_owned();
            match k {
                "sslmode" => mode = v,
                "sslrootcert" => root_cert = Some(v),
                _ => kept.push(pair),
            }
        }
        let url = match kept.is_empty() {
            true => base.to_string(),
            false => format!("{base}?{}", kept.join("&")),
        };
        let mut config = tokio_postgres::Config::from_str(&url)
            .map_err(|e| format!("invalid PostgreSQL URL: {e}"))?;
        if config.get_hosts().is_empty() {
            return Err("invalid PostgreSQL URL: no host".to_string());
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // Enough for the connection to be told apart in pg_stat_activity.
        if config.get_application_name().is_none() {
            config.application_name("idem");
        }
        let verify = match (mode.as_str(), &root_cert) {
            ("disable", _) => {
                config.ssl_mode(SslMode::Disable);
                return Ok(Target { config, tls: None });
            }
            ("prefer", _) => (SslMode::Prefer, Verify::None),
            ("require", None) => (SslMode::Require, Verify::None),
            ("require" | "verify-ca" | "verify-full", _) => (SslMode::Require, Verify::Full),
            (other, _) => {
                return Err(format!(
                "invalid sslmode {other:?}: use disable, prefer, require, verify-ca or verify-full"
            ))
            }
        };
        config.ssl_mode(verify.0);
        let tls = tls_config(verify.1, root_cert.as_deref())?;
        Ok(Target {
            config,
            tls: Some(MakeRustlsConnect::new(tls)),
        })
    }
}

fn tls_config(verify: Verify, root_cert: Option<&str>) -> Result<ClientConfig, String> {
    crate::tls::install_crypto_provider();
    if verify == Verify::None {
        return Ok(ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified))
            .with_no_client_auth());
    }
    let Some(path) = root_cert else {
        return Ok(crate::tls::client_config());
    };
    let pem = std::fs::read(path).map_err(|e| format!("cannot read sslrootcert {path}: {e}"))?;
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile_certs(&pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("bad certificate in {path}: {e}"))?;
    }
    Ok(ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The certificates of a PEM file.
fn rustls_pemfile_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot parse sslrootcert: {e}"))
}

/// libpq's `sslmode=require` without a root certificate: encrypted, but the server's
/// certificate is not checked. Signatures are still verified, so the handshake itself
/// is sound; only the server's identity is taken on trust (what `require` means).
#[derive(Debug)]
struct Unverified;

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_host_url_with_read_write_target() {
        let t = Target::parse(
            "postgres://idem:pw@10.0.0.1:5432,10.0.0.2:5433/idem?target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(t.config.get_hosts().len(), 2);
        assert_eq!(t.config.get_ports(), &[5432, 5433]);
        assert!(t.tls.is_none());
        assert_eq!(
            t.config.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
    }

    #[test]
    fn sslmodes_of_libpq_are_understood() {
        for mode in ["require", "verify-ca", "verify-full", "prefer"] {
            let t = Target::parse(&format!("postgres://h/db?sslmode={mode}")).unwrap();
            assert!(t.tls.is_some(), "{mode}");
        }
        assert!(Target::parse("postgres://h/db?sslmode=disable")
            .unwrap()
            .tls
            .is_none());
        let err = Target::parse("postgres://h/db?sslmode=sometimes")
            .err()
            .unwrap();
        assert!(err.contains("invalid sslmode"), "{err}");
        let err = Target::parse("postgres://h/db?sslmode=verify-full&sslrootcert=/nope")
            .err()
            .unwrap();
        assert!(err.contains("/nope"), "{err}");
        assert!(Target::parse("postgres://h/db?bogus_option=1").is_err());
    }
}
