//! Stored responses keep only what must be kept and are unreadable at rest (SPEC §1
//! "Stored responses"), read back from the real stores' raw content: every Redis value,
//! every PostgreSQL row as text.
//! - credential headers (`Set-Cookie` …) are never stored, the route's `store_headers`
//!   chooses the rest; the first caller still gets every header;
//! - with `store.encryption` neither the cookie nor a marker from the body is anywhere
//!   in the store, and replays still return the body and the non-credential headers;
//! - key rotation start to finish, on a running idem reloaded with SIGHUP;
//! - a sealed value copied under another key does not open: 409 `record_unreadable`,
//!   never a second execution.

mod key_rotation;
use crate::store_cases;
use crate::support;

use std::path::Path;

use base64::Engine;
use support::env::{Backend, Env};
use support::harness::{metric_sum, post, send, IdemProcess, Resp};
use support::raw_store;

const COOKIE: &str = "session=c00k1e-S3CRET; HttpOnly";
const MARKER: &str = "MARKER-card-holder-Ada-Lovelace";

fn write_key(dir: &Path, id: &str, byte: u8) -> String {
    let path = dir.join(id);
    std::fs::write(
        &path,
        base64::engine::general_purpose::STANDARD.encode([byte; 32]),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn config(env: &Env, keys: &[(&str, &str)], route_extra: &str) -> String {
    let mut store = env.base_yaml("5s");
    if !keys.is_empty() {
        let listed: Vec<String> = keys
            .iter()
            .map(|(id, file)| format!("      - {{id: \"{id}\", file: \"{file}\"}}\n"))
            .collect();
        let encryption = format!("  encryption:\n    keys:\n{}", listed.concat());
        store = store.replacen("store:\n", &format!("store:\n{encryption}"), 1);
    }
    format!(
        "{store}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n{route_extra}"
    )
}

/// Every value the shared store holds, keys included, as one text (lossy).
fn raw_store(env: &Env) -> String {
    let entries = raw_store::dump(&env.backend).expect("a shared store");
    let lines: Vec<String> = entries
        .iter()
        .map(|e| format!("{} {}", e.key, e.value))
        .collect();
    lines.join("\n")
}

/// The store's own entry for intent `id`, read past idem; fails if it is not there.
/// `None` for the memory store, inside the idem process.
fn stored_record(backend: &Backend, id: &str) -> Option<String> {
    let entries = raw_store::dump(backend)?;
    let store_key = idem::key::StoreKey::new("charge", "", &format!("charge:{id}"));
    Some(
        raw_store::entry(&entries, &store_key.to_string())
            .value
            .clone(),
    )
}

/// 409 `record_unreadable`, and nothing of the sealed response shown.
#[track_caller]
fn assert_unreadable(r: &Resp) {
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "record_unreadable"),
        "{}",
        r.text()
    );
    assert!(!r.text().contains(MARKER), "{}", r.text());
}

async fn charge(p: &IdemProcess, id: &str) -> Resp {
    let u = p.url(&format!("/invoices/{id}/charge"));
    post(
        &u,
        &[("x-mock-set-cookie", COOKIE), ("x-mock-echo", MARKER)],
        "{}",
    )
    .await
}

store_cases!([redis, postgres] [credential_headers_are_never_stored,
    sealed_at_rest_and_replayed_in_full,
    a_sealed_value_copied_under_another_key_does_not_open]);

async fn credential_headers_are_never_stored(backend: Backend) {
    let env = Env::new(backend).await;
    let p = IdemProcess::spawn(&config(
        &env,
        &[],
        "    store_headers: {exclude: [x-session-token]}\n",
    ))
    .await;
    let first = charge(&p, "c1").await;
    assert_eq!(first.status, 201);
    assert_eq!(
        first.header("set-cookie"),
        Some(COOKIE),
        "the first caller gets every header"
    );
    assert_eq!(first.header("x-session-token"), Some(COOKIE));
    for name in ["authentication-info", "proxy-authentication-info"] {
        assert!(
            first.header(name).is_some_and(|v| v.contains(COOKIE)),
            "{name}"
        );
    }
    let raw = raw_store(&env);
    assert!(
        !raw.contains("c00k1e-S3CRET"),
        "the cookie is in the store: {raw}"
    );
    assert!(
        raw.contains(MARKER),
        "without encryption the body is stored as is"
    );
    let replay = charge(&p, "c1").await;
    assert!(replay.replayed());
    assert_eq!(
        replay.header("set-cookie"),
        None,
        "a replay never hands out the session"
    );
    assert_eq!(
        replay.header("x-session-token"),
        None,
        "excluded by the route"
    );
    for name in ["authentication-info", "proxy-authentication-info"] {
        assert_eq!(
            replay.header(name),
            None,
            "{name} carries credentials (RFC 9110 §11.6.3)"
        );
    }
    assert!(replay.header("x-charge-id").is_some());
    assert_eq!(replay.body, first.body);
}

async fn sealed_at_rest_and_replayed_in_full(backend: Backend) {
    let env = Env::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "2026-12", 1);
    let p = IdemProcess::spawn(&config(&env, &[("2026-12", &key)], "")).await;
    let first = charge(&p, "s1").await;
    assert_eq!(first.status, 201);
    // The record is there, sealed, before anything is said of what it does not show.
    let record = stored_record(&env.backend, "s1").unwrap();
    assert!(record.contains("\"sealed\":\"2026-12\""), "{record}");
    let raw = raw_store(&env);
    for secret in ["c00k1e-S3CRET", MARKER, "x-charge-id", "application/json"] {
        assert!(
            !raw.contains(secret),
            "{secret:?} readable in the store: {raw}"
        );
    }
    let replay = charge(&p, "s1").await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    assert!(replay.text().contains(MARKER));
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(replay.header("x-charge-id"), first.header("x-charge-id"));
    assert_eq!(replay.header("set-cookie"), None);
    assert_eq!(env.upstream.executions("charge:s1"), 1);
}

async fn a_sealed_value_copied_under_another_key_does_not_open(backend: Backend) {
    let env = Env::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "k", 2);
    let p = IdemProcess::spawn(&config(&env, &[("k", &key)], "")).await;
    assert_eq!(charge(&p, "victim").await.status, 201);
    assert_eq!(charge(&p, "thief").await.status, 201);
    // Copy the victim's sealed record over the thief's, in the store itself.
    let store_key = |id: &str| idem::key::StoreKey::new("charge", "", &format!("charge:{id}"));
    match &env.backend {
        Backend::Redis(server) => {
            let mut c = ::redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let victim: Vec<u8> = ::redis::cmd("GET")
                .arg(format!("idem:{}", store_key("victim")))
                .query(&mut c)
                .unwrap();
            let _: () = ::redis::cmd("SET")
                .arg(format!("idem:{}", store_key("thief")))
                .arg(victim)
                .query(&mut c)
                .unwrap();
        }
        Backend::Postgres(server) => {
            server.psql(&format!(
                "UPDATE idem_records SET record = (SELECT record FROM idem_records WHERE key = '\\x{}') WHERE key = '\\x{}'",
                store_key("victim"),
                store_key("thief")
            ));
        }
        _ => unreachable!(),
    }
    assert_unreadable(&charge(&p, "thief").await);
    assert_eq!(
        env.upstream.executions("charge:thief"),
        1,
        "never executed again"
    );
    let metrics = send("GET", &p.admin_url("/metrics"), &[], "").await.text();
    assert_eq!(
        metric_sum(&metrics, "idem_unreadable_records_total"),
        1.0,
        "{metrics}"
    );
}

/// Sealing is the proxy's, before any store: on every backend, Cluster and Sentinel
/// included, the outcome is stored sealed and replays in full; without the key it is
/// unreadable, 409 `record_unreadable` and never a second execution: from another
/// replica without the key (a shared store), or from this one reloaded without it (the
/// memory store, which lives inside its idem).
async fn sealed_replay_on_this_backend(backend: Backend) {
    let env = Env::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "k", 5);
    let p = IdemProcess::spawn(&config(&env, &[("k", &key)], "")).await;
    let first = charge(&p, "e1").await;
    assert_eq!(first.status, 201);
    if let Some(record) = stored_record(&env.backend, "e1") {
        assert!(record.contains("\"sealed\":\"k\""), "{record}");
        assert!(!record.contains(MARKER), "{record}");
    }
    let replay = charge(&p, "e1").await;
    assert!(replay.replayed(), "{} {}", replay.status, replay.text());
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("set-cookie"), None);

    let keyless = config(&env, &[], "");
    let other_replica = match env.backend {
        Backend::Memory(_) => {
            key_rotation::reload(&p, &keyless, 2.0).await;
            None
        }
        _ => Some(IdemProcess::spawn(&keyless).await),
    };
    let without_key = other_replica.as_ref().unwrap_or(&p);
    let shown = send(
        "GET",
        &without_key.admin_url("/v1/keys/charge/charge:e1"),
        &[],
        "",
    )
    .await;
    assert_eq!(shown.json()["sealed_with"], "k", "{}", shown.text());
    assert_unreadable(&charge(without_key, "e1").await);
    assert_eq!(env.upstream.executions("charge:e1"), 1);
}

store_cases!([memory, redis_cluster, redis_sentinel][sealed_replay_on_this_backend]);
