//! TLS fixtures: a private CA with a server certificate for 127.0.0.1, and a
//! redis-server that speaks only TLS with it.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
use rustls::pki_types::CertificateDer;

use super::harness::free_port;

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
    pub fn start_with(dir: &Path, extra: &[&str]) -> TlsRedis {
        let port = free_port();
        let child = Command::new("redis-server")
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
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server not found: install it (Debian: apt-get install redis-server)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "TLS redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis(child, port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
