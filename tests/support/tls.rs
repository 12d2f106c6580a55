//! TLS fixtures: a private CA with a server certificate for 127.0.0.1, and a
//! redis-server that speaks only TLS with it.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
use rustls::pki_types::CertificateDer;

use super::harness::free_port;
use super::poll::eventually_blocking;

pub struct Pki {
    pub dir: tempfile::TempDir,
    pub cert: CertificateDer<'static>,
    pub key_der: Vec<u8>,
}

/// A private CA and a server certificate for 127.0.0.1 / localhost, written as PEM files.
pub fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
    Pki {
        cert: cert.der().clone(),
        key_der: key.serialize_der(),
        dir,
    }
}

/// A redis-server speaking only TLS, killed on drop.
pub struct TlsRedis(Child, pub u16);

impl TlsRedis {
    pub fn start(dir: &Path) -> TlsRedis {
        TlsRedis::start_with(dir, &[])
    }

    /// With `extra` arguments (e.g. `--user` for an ACL user).
    ///
    /// redis-server cannot bind port 0, so: a free port, then its own log decides
    /// whether *it* bound it ("Ready to accept connections") or lost the port to another
    /// test (it exits) and we try another one.
    pub fn start_with(dir: &Path, extra: &[&str]) -> TlsRedis {
        for attempt in 0..5 {
            let port = free_port();
            let log_path = dir.join(format!("redis-{port}-{attempt}.log"));
            let log = std::fs::File::create(&log_path).unwrap();
            let mut child = Command::new("redis-server")
                .args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                ])
                .arg("--tls-cert-file")
                .arg(dir.join("server.pem"))
                .arg("--tls-key-file")
                .arg(dir.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(dir.join("ca.pem"))
                .args([
                    "--tls-auth-clients",
                    "no",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(extra)
                .current_dir(dir)
                .stdout(log)
                .spawn()
                .expect(
                    "redis-server not found: install it (Debian: apt-get install redis-server)",
                );
            let bound =
                eventually_blocking(Duration::from_secs(10), "TLS redis-server started", || {
                    if std::fs::read_to_string(&log_path)
                        .unwrap_or_default()
                        .contains("Ready to accept connections")
                    {
                        return Some(true);
                    }
                    child.try_wait().unwrap().map(|_| false)
                });
            if bound {
                return TlsRedis(child, port);
            }
        }
        panic!("TLS redis-server could not bind a port in 5 attempts");
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
