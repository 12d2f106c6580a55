//! A reconciliation lookup stays on its own path (issue 32 §3), through idem in-process
//! with its memory store and the mock upstream.
//!
//! The upstream key goes into the lookup's path as one segment. Left unencoded, a key
//! `..` turned `/charges/{key}/status` into `/charges/../status`: a server that resolves
//! dot segments answers `/status` — an unrelated 200 that idem stored and replayed as the
//! outcome. Encoded as `%2E%2E` it is still a dot segment to WHATWG URL parsers, so idem
//! sends no lookup for such a key at all: the outcome stays unknown for a person to
//! settle. The mock upstream records every path it receives, as received.

use crate::support;

use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{post, url, Resp};
use support::poll::eventually;

fn routes(lookup: &str) -> String {
    format!(
        r#"
routes:
  - name: op
    path: /ops
    key: "{{header.x-op}}"
    lease: 1s
    on_unknown: reconcile
    reconcile:
      path: "{lookup}"
      found: [200]
      absent: [404]
      timeout: 1s
"#
    )
}

/// Sends operation `op`, which the upstream holds past idem's timeout (504: unknown),
/// then repeats it until its lease has ended, and returns that repeat's answer.
async fn unknown_then_repeated(idem: &support::harness::Idem, op: &str) -> Resp {
    let u = url(idem, "/ops");
    let held = [("x-op", op), ("x-mock-delay-ms", "3000")];
    let first = post(&u, &held, "{}").await;
    assert_eq!(first.status, 504, "{}", first.text());
    eventually(Duration::from_secs(6), "the lease ended", async || {
        let r = post(&u, &[("x-op", op)], "{}").await;
        let in_progress = r.status == 409 && r.code() == "request_in_progress";
        (!in_progress).then_some(r)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dot_dot_key_never_climbs_out_of_the_lookup_path() {
    let env = Env::new(Backend::memory()).await;
    let idem = env
        .idem_with_timeout(&routes("/charges/{key}/status"), "500ms")
        .await;
    let r = unknown_then_repeated(&idem, "..").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "outcome_unknown"),
        "{}",
        r.text()
    );
    let paths: Vec<String> = env
        .upstream
        .received()
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("/../") || p.ends_with("/..")),
        "a lookup left its path: {paths:?}"
    );
    assert_eq!(paths, ["/ops"], "the call itself and no lookup");
    assert_eq!(env.upstream.executions(".."), 1, "never sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dots_in_a_longer_key_are_encoded_into_its_segment() {
    let env = Env::new(Backend::memory()).await;
    let idem = env
        .idem_with_timeout(&routes("/charges/{key}/status"), "500ms")
        .await;
    // The mock answers an unknown path as a call (201): neither found nor absent.
    let r = unknown_then_repeated(&idem, "../x.y").await;
    assert_eq!(r.status, 409, "{}", r.text());
    let lookups: Vec<String> = env
        .upstream
        .received()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.starts_with("/charges/"))
        .collect();
    assert!(!lookups.is_empty(), "looked up");
    for path in &lookups {
        assert_eq!(path, "/charges/%2E%2E%2Fx%2Ey/status");
    }
}
