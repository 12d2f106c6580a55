//! TLS fixtures: a private CA with a server certificate for 127.0.0.1, the redis-server
//! arguments that make a server (or sentinel, or cluster node) speak only TLS with it,
//! and a client connection that trusts it (the test support's own admin commands).
//!
//! A TLS Redis process is a [`super::redis::RedisServer`] started with [`TlsFiles`]:
//! one builder for plain and TLS servers, sentinels and cluster nodes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

pub struct Pki {
    pub dir: tempfile::TempDir,
    pub cert: CertificateDer<'static>,
    pub key_der: Vec<u8>,
    ca: CertificateDer<'static>,
}

/// A private CA and a server certificate for 127.0.0.1 / localhost, written as PEM files.
pub fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct subjects: OpenSSL (redis-cli, redis-server's replication and cluster
    // links) takes a certificate whose subject equals its issuer for self-signed.
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "idem test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
    Pki {
        cert: cert.der().clone(),
        key_der: key.serialize_der(),
        ca: ca.der().clone(),
        dir,
    }
}

impl Pki {
    /// What a TLS Redis process and its admin client need; valid while `self` lives.
    pub fn files(&self) -> TlsFiles {
        idem::tls::install_crypto_provider();
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsFiles {
            dir: self.dir.path().to_path_buf(),
            client: Arc::new(config),
        }
    }

    /// The CA file idem is given (`store.redis.tls.ca_file`).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
}

/// The certificate files of a [`Pki`], and a client configuration trusting its CA.
#[derive(Clone)]
pub struct TlsFiles {
    dir: PathBuf,
    client: Arc<ClientConfig>,
}

impl TlsFiles {
    /// redis-server arguments for TLS only on `port`: no plain port, replication and
    /// the cluster bus over TLS too, and clients not asked for certificates.
    pub fn server_args(&self, port: u16) -> Vec<String> {
        let file = |name: &str| self.dir.join(name).display().to_string();
        [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &file("server.pem"),
            "--tls-key-file",
            &file("server.key"),
            "--tls-ca-cert-file",
            &file("ca.pem"),
            "--tls-auth-clients",
            "no",
            "--tls-replication",
            "yes",
            "--tls-cluster",
            "yes",
        ]
        .map(String::from)
        .to_vec()
    }

    /// `redis-cli` arguments to reach such a server.
    pub fn cli_args(&self) -> Vec<String> {
        let ca = self.dir.join("ca.pem").display().to_string();
        vec!["--tls".into(), "--cacert".into(), ca]
    }

    /// A TLS connection to `addr`, verified against the CA.
    pub fn connect(&self, addr: SocketAddr, within: Duration) -> std::io::Result<TlsStream> {
        let tcp = TcpStream::connect_timeout(&addr, within)?;
        tcp.set_read_timeout(Some(within))?;
        let name = ServerName::IpAddress(addr.ip().into());
        let conn =
            ClientConnection::new(self.client.clone(), name).map_err(std::io::Error::other)?;
        Ok(StreamOwned::new(conn, tcp))
    }
}

pub type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Plain TCP or TLS, for the support's raw RESP commands.
pub trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}
