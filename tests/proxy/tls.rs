//! TLS on both outbound legs: an `https://` upstream and a `rediss://` store, each with a
//! certificate from a private CA that idem trusts through `SSL_CERT_FILE` (or for Redis
//! `store.redis.tls.ca_file`); Redis ACL users, whose passwords never show in logs
//! or `idem check` output; and the PostgreSQL store with libpq's `sslmode`s.

use crate::support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::PrivateKeyDer;
use support::harness::{post, IdemProcess};
use support::redis::RedisServer;
use support::redis_acl::{
    assert_password_hidden, assert_refused, user_args, PASSWORD, PASSWORD_ENV, WRONG_CA,
    WRONG_PASSWORD, WRONG_PASSWORD_REFUSED,
};
use support::tls::{pki, Pki};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_and_rediss_store() {
    let _panics = crate::support::panics::watched();
    let pki = pki();
    let (upstream_port, executions) = https_upstream(&pki).await;
    let redis = RedisServer::start_with_tls(Some(&pki.files()), &[]);
    let yaml = format!(
        "upstream:\n  url: https://127.0.0.1:{upstream_port}\nstore:\n  backend: redis\n  redis:\n    url: rediss://127.0.0.1:{}/0\nroutes:\n  - name: charge\n    path: /invoices/{{id}}/charge\n    key: \"charge:{{path.id}}\"\n",
        redis.port()
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
    let _panics = crate::support::panics::watched();
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

/// A TLS server with the ACL user of `docs/redis.md`'s standalone rules.
fn acl_server(pki: &Pki) -> RedisServer {
    let user = user_args("standalone");
    RedisServer::start_with_tls(
        Some(&pki.files()),
        &user.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

fn rediss_yaml(port: u16, password_env: &str, ca_file: &std::path::Path) -> String {
    format!(
        "upstream:\n  url: http://127.0.0.1:9\nstore:\n  backend: redis\n  redis:\n    url: rediss://idem:${{{password_env}}}@127.0.0.1:{port}/0\n    tls:\n      ca_file: {}\nroutes:\n  - name: charge\n    path: /invoices/{{id}}/charge\n    key: \"charge:{{path.id}}\"\n",
        ca_file.display()
    )
}

/// `rediss://` with the CA from `tls.ca_file` (no `SSL_CERT_FILE`) and an ACL user
/// whose password comes from `${ENV}`: ready, and the password is in no output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_ca_file_and_acl_user_from_env() {
    let _panics = crate::support::panics::watched();
    let pki = pki();
    let redis = acl_server(&pki);
    let yaml = rediss_yaml(redis.port(), "REDIS_PASSWORD", &pki.ca_file());
    let idem = IdemProcess::spawn_with(&yaml, &[], "debug", &PASSWORD_ENV).await;
    let ready = idem.readiness(200).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    let first = post(&idem.url("/invoices/acl0/charge"), &[], "{}").await;
    assert_eq!(
        first.status,
        502,
        "past the store to the (absent) upstream: {}",
        first.text()
    );
    assert_password_hidden(&idem, &PASSWORD_ENV, PASSWORD);
}

/// A CA file that does not hold the server's CA: refused, with a clear reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_the_wrong_ca_is_refused() {
    let _panics = crate::support::panics::watched();
    let (pki, other) = (pki(), pki());
    let redis = acl_server(&pki);
    let yaml = rediss_yaml(redis.port(), "REDIS_PASSWORD", &other.ca_file());
    assert_refused(&yaml, PASSWORD, WRONG_CA).await;
}

/// A wrong password: refused, the logs say why, and do not echo it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_with_a_wrong_password_is_refused_clearly() {
    let _panics = crate::support::panics::watched();
    let pki = pki();
    let redis = acl_server(&pki);
    let yaml = rediss_yaml(redis.port(), "REDIS_PASSWORD", &pki.ca_file());
    assert_refused(&yaml, WRONG_PASSWORD, WRONG_PASSWORD_REFUSED).await;
}

/// `sslmode=verify-full` with `sslrootcert` (the private CA) connects and every pooled
/// connection is encrypted; `require` without a root certificate connects unverified;
/// `verify-full` against another CA refuses the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_over_tls_per_sslmode() {
    let _panics = crate::support::panics::watched();
    use idem::store::{PostgresStore, Store};
    use support::postgres::PgServer;
    use support::store::{in_progress, key, migrate, postgres_config};

    let certs = pki();
    let server = PgServer::start_tls(
        &certs.dir.path().join("server.pem"),
        &certs.dir.path().join("server.key"),
    );
    migrate(&server.url());
    let ca = certs.dir.path().join("ca.pem");
    let url = |query: &str| {
        format!(
            "postgres://postgres@localhost:{}/postgres?{query}",
            server.port()
        )
    };
    let verified = url(&format!("sslmode=verify-full&sslrootcert={}", ca.display()));
    let store = Store::from(
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

    let unverified = Store::from(
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
    let refused = Store::from(
        PostgresStore::connect(&postgres_config(&wrong_ca))
            .await
            .unwrap(),
    );
    assert!(
        refused.ping().await.is_err(),
        "a server the CA did not sign is refused"
    );
}
