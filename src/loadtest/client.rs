//! The HTTP side of a run: the pooled client, one request's exchange classed into an
//! [`Reply`], and the `--check-url` reads of each intent's execution count after the
//! load.

use std::hash::{DefaultHasher, Hasher};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::report::{CheckResult, Reply, Tally};
use super::template::{IntentVars, LoadTemplate};

pub(super) type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub(super) fn client(pool: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(pool)
        .build(connector)
}

pub(super) async fn send(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    timeout: Duration,
) -> Reply {
    let exchange = async {
        let response = client.request(request).await.map_err(|e| {
            // The hyper-util error alone says little ("client error (Connect)").
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        })?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the body: {e}"))?
            .to_bytes();
        let body_hash = (200..300).contains(&status).then(|| {
            let mut h = DefaultHasher::new();
            h.write(&body);
            h.finish()
        });
        Ok::<_, String>(Reply::Response {
            status,
            replayed,
            body_hash,
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Reply::Transport(e),
        Err(_) => Reply::Timeout,
    }
}

/// Ask `url` (rendered per intent) for each sent intent's execution count.
pub(super) async fn check_counts(
    client: &HttpClient,
    tally: &Tally,
    url: &LoadTemplate,
    run: &str,
    concurrency: usize,
) -> CheckResult {
    use futures_util::stream::{self, StreamExt};

    let requests = tally.sent_intents().map(|i| {
        let key = tally.key(i);
        let uri = url.render(IntentVars {
            index: i as u64,
            key: &key,
            run,
        });
        let client = client.clone();
        async move {
            let count = read_count(&client, &uri).await;
            (key, count)
        }
    });
    let mut results = stream::iter(requests).buffer_unordered(concurrency.clamp(1, 64));
    let mut check = CheckResult::default();
    while let Some((key, count)) = results.next().await {
        check.checked += 1;
        match count {
            Ok(1) => {}
            Ok(n) => {
                check.wrong_total += 1;
                if check.wrong.len() < 10 {
                    check.wrong.push((key, n));
                }
            }
            Err(e) => {
                check.failures_total += 1;
                if check.failures.len() < 10 {
                    check.failures.push(format!("{key}: {e}"));
                }
            }
        }
    }
    check
}

async fn read_count(client: &HttpClient, uri: &str) -> Result<u64, String> {
    let request = Request::get(uri)
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("bad check URL {uri}: {e}"))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("GET {uri}: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("GET {uri}: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("GET {uri}: status {status}"));
        }
        let json: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| format!("GET {uri}: the answer is not JSON"))?;
        json.get("count")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("GET {uri}: no numeric \"count\" field"))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| format!("GET {uri}: no answer within 10 s"))?
}
