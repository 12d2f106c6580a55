//! TLS on the outbound legs: an `https://` upstream and a `rediss://` store, each with a
//! certificate from a private CA that idem trusts through `SSL_CERT_FILE`, and the
//! PostgreSQL store with libpq's `sslmode`s.

mod support;

use std::convert::Infallible;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use support::harness::{free_port, post, IdemProcess};
use support::poll::eventually_blocking;

struct Pki {
    dir: tempfile::TempDir,
    cert: CertificateDer<'static>,
    key_der: Vec<u8>,
}

/// A private CA and a server certificate for 127.0.0.1 / localhost, written as PEM files.
fn pki() -> Pki {
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

/// An HTTPS upstream that counts executions and answers each with its own id.
async fn https_upstream(pki: &Pki) -> (u16, Arc<AtomicU64>) {
    idem::tls::install_crypto_provider();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![pki.cert.clone()],
            PrivateKeyDer::try_from(pki.key_der.clone()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicU64::new(0));
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, counter) = (acceptor.clone(), counter.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |_req| {
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let body = Full::new(Bytes::from(format!("{{\"id\":\"tls_{n}\"}}")));
                    let mut response = http::Response::new(body);
                    *response.status_mut() = http::StatusCode::CREATED;
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, count)
}

/// A redis-server speaking only TLS, killed on drop.
struct TlsRedis(Child, u16);

impl TlsRedis {
    /// redis-server cannot bind port 0, so: a free port, then its own log decides
    /// whether *it* bound it ("Ready to accept connections") or lost the port to another
    /// test (it exits) and we try another one.
    fn start(dir: &Path) -> TlsRedis {
        for attempt in 0..5 {
            let port = free_port();
            let log_path = dir.join(format!("redis-{attempt}.log"));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_and_rediss_store() {
    let pki = pki();
    let (upstream_port, executions) = https_upstream(&pki).await;
    let redis = TlsRedis::start(pki.dir.path());
    let yaml = format!(
        "upstream:\n  url: https://127.0.0.1:{upstream_port}\nstore:\n  backend: redis\n  redis:\n    url: rediss://127.0.0.1:{}/0\nroutes:\n  - name: charge\n    path: /invoices/{{id}}/charge\n    key: \"charge:{{path.id}}\"\n",
        redis.1
    );
    let ca = pki.dir.path().join("ca.pem");
    let envs = [("SSL_CERT_FILE", ca.to_str().unwrap())];
    let idem = IdemProcess::spawn_with(&yaml, &[], "warn", &envs).await;
    let ready = support::harness::send("GET", &idem.admin_url("/readyz"), &[], "").await;
    assert_eq!(
        ready.status,
        200,
        "rediss store reachable: {}",
        ready.text()
    );
    let u = idem.url("/invoices/tls1/charge");
    let first = post(&u, &[], "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    let again = post(&u, &[], "{}").await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_upstream_certificate_is_refused() {
    let pki = pki();
    let (upstream_port, executions) = https_upstream(&pki).await;
    let yaml = format!(
        "upstream:\n  url: https://127.0.0.1:{upstream_port}\nroutes:\n  - name: charge\n    path: /invoices/{{id}}/charge\n    key: \"charge:{{path.id}}\"\n"
    );
    // No SSL_CERT_FILE: the private CA is not trusted.
    let idem = IdemProcess::spawn(&yaml).await;
    let r = post(&idem.url("/invoices/tls2/charge"), &[], "{}").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(executions.load(Ordering::SeqCst), 0);
}

/// `sslmode=verify-full` with `sslrootcert` (the private CA) connects and every pooled
/// connection is encrypted; `require` without a root certificate connects unverified;
/// `verify-full` against another CA refuses the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_over_tls_per_sslmode() {
    use idem::store::{PostgresStore, Store};
    use support::postgres::PgServer;
    use support::store::{in_progress, key, postgres_config};

    let certs = pki();
    let server = PgServer::start_tls(
        &certs.dir.path().join("server.pem"),
        &certs.dir.path().join("server.key"),
    );
    let ca = certs.dir.path().join("ca.pem");
    let url = |query: &str| {
        format!(
            "postgres://postgres@localhost:{}/postgres?{query}",
            server.port()
        )
    };
    let verified = url(&format!("sslmode=verify-full&sslrootcert={}", ca.display()));
    let store = Store::Postgres(
        PostgresStore::connect(&postgres_config(&verified))
            .await
            .unwrap(),
    );
    store.ping().await.expect("verify-full with the private CA");
    let lease = Duration::from_secs(30);
    store
        .reserve(&key(1), &in_progress(lease), lease)
        .await
        .unwrap();
    let encrypted = server.psql(
        "SELECT bool_and(s.ssl) AND count(*) > 0 FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'idem'",
    );
    assert_eq!(encrypted, "t", "idem's connections are encrypted");

    let unverified = Store::Postgres(
        PostgresStore::connect(&postgres_config(&url("sslmode=require")))
            .await
            .unwrap(),
    );
    unverified
        .ping()
        .await
        .expect("require: encrypted, not verified");

    let other = pki();
    let wrong_ca = url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        other.dir.path().join("ca.pem").display()
    ));
    let refused = Store::Postgres(
        PostgresStore::connect(&postgres_config(&wrong_ca))
            .await
            .unwrap(),
    );
    assert!(
        refused.ping().await.is_err(),
        "a server the CA did not sign is refused"
    );
}
