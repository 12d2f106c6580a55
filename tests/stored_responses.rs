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

mod support;

use std::path::Path;

use base64::Engine;
use support::env::{Backend, Env};
use support::harness::{metric_sum, post, send, IdemProcess};

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

/// Every value the store holds, as text (lossy).
fn raw_store(env: &Env) -> String {
    match &env.backend {
        Backend::Redis(server) => {
            let mut c = ::redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let keys: Vec<String> = ::redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
            let mut out = String::new();
            for key in keys {
                let value: Option<Vec<u8>> =
                    ::redis::cmd("GET").arg(&key).query(&mut c).unwrap_or(None);
                out.push_str(&key);
                out.push_str(&String::from_utf8_lossy(&value.unwrap_or_default()));
            }
            out
        }
        Backend::Postgres(server) => server.psql(
            "SELECT string_agg(t::text || encode(t.record, 'escape'), E'\\n') FROM idem_records t",
        ),
        _ => panic!("a shared store"),
    }
}

async fn charge(p: &IdemProcess, id: &str) -> support::harness::Resp {
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
    let r = charge(&p, "thief").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "record_unreadable"),
        "{}",
        r.text()
    );
    assert!(!r.text().contains(MARKER));
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

/// Rewrite `p`'s configuration, SIGHUP it, and wait until it runs `generation`.
async fn reload(p: &IdemProcess, yaml: &str, generation: f64) {
    p.rewrite_config(yaml);
    p.signal("HUP");
    support::poll::eventually(std::time::Duration::from_secs(5), "reloaded", async || {
        let m = send("GET", &p.admin_url("/metrics"), &[], "").await.text();
        metric_sum(&m, "idem_config_generation") >= generation
    })
    .await;
}

/// Rotation on a running idem (SIGHUP): add the new key first, then drop the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_start_to_finish() {
    let env = Env::new(Backend::redis()).await;
    let dir = tempfile::tempdir().unwrap();
    let old = write_key(dir.path(), "old", 3);
    let new = write_key(dir.path(), "new", 4);
    let p = IdemProcess::spawn(&config(&env, &[("old", &old)], "")).await;
    let before = charge(&p, "r-old").await;
    // The new key is added first: old records still replay; new ones are sealed with it.
    reload(&p, &config(&env, &[("new", &new), ("old", &old)], ""), 2.0).await;
    let replay = charge(&p, "r-old").await;
    assert!(replay.replayed());
    assert_eq!(replay.body, before.body);
    let after = charge(&p, "r-new").await;
    assert_eq!(after.status, 201);
    let raw = raw_store(&env);
    assert!(raw.contains("\"sealed\":\"new\""), "{raw}");
    // The old key dropped (after `retention` in real life): its records are unreadable,
    // never executed again; the new key's still replay.
    reload(&p, &config(&env, &[("new", &new)], ""), 3.0).await;
    let gone = charge(&p, "r-old").await;
    assert_eq!(
        (gone.status, gone.code().as_str()),
        (409, "record_unreadable")
    );
    let kept = charge(&p, "r-new").await;
    assert!(kept.replayed());
    assert_eq!(kept.body, after.body);
    assert_eq!(env.upstream.executions("charge:r-old"), 1);
    assert_eq!(env.upstream.executions("charge:r-new"), 1);
    // A replica without any key: 409 as well, never a second execution or a 500.
    let keyless = IdemProcess::spawn(&config(&env, &[], "")).await;
    let r = charge(&keyless, "r-new").await;
    assert_eq!((r.status, r.code().as_str()), (409, "record_unreadable"));
    assert_eq!(env.upstream.executions("charge:r-new"), 1);
}

/// `idem keys new-encryption-key` prints a fresh key a config can use as it is, and
/// `idem check` names the key ids, never the material.
#[test]
fn a_new_key_from_the_cli_is_accepted_and_never_echoed() {
    let idem = env!("CARGO_BIN_EXE_idem");
    let run = |args: &[&str]| {
        std::process::Command::new(idem)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["keys", "new-encryption-key"]);
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .unwrap();
    assert_eq!(bytes.len(), 32);
    let again = run(&["keys", "new-encryption-key"]);
    assert_ne!(again.stdout, key.as_bytes(), "fresh every time");
    // It talks to nothing: its help lists none of the admin API's flags (which `keys
    // get`'s does).
    let help = |sub: &str| String::from_utf8(run(&["keys", sub, "--help"]).stdout).unwrap();
    let flags = ["--route", "--scope", "--admin", "--token"];
    let local = help("new-encryption-key");
    assert!(flags.iter().all(|f| !local.contains(f)), "{local}");
    let get = help("get");
    assert!(flags.iter().all(|f| get.contains(f)), "{get}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k1");
    std::fs::write(&file, &key).unwrap();
    let config = dir.path().join("idem.yaml");
    std::fs::write(
        &config,
        format!(
            "upstream:\n  url: http://127.0.0.1:3000\nstore:\n  encryption:\n    keys:\n      - {{id: k1, file: {}}}\n",
            file.display()
        ),
    )
    .unwrap();
    let check = run(&["check", "--config", config.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{text}");
    assert!(!text.contains(key.trim()), "{text}");
    assert!(text.contains("sealed (keys: k1)"), "{text}");
    std::fs::write(&file, "c2hvcnQ=").unwrap();
    let bad = run(&["check", "--config", config.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&bad.stderr).into_owned() + &String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(64), "{text}");
    assert!(
        text.contains("store.encryption.keys[0].file") && text.contains("holds 5 bytes"),
        "{text}"
    );
    // The credential key: said to be in use, never echoed, checked like the others.
    std::fs::write(&file, &key).unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::write(&credentials, &key).unwrap();
    let yaml = std::fs::read_to_string(&config).unwrap()
        + &format!("    credential_key_file: {}\n", credentials.display());
    std::fs::write(&config, yaml).unwrap();
    let keyed = run(&["check", "--config", config.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&keyed.stdout).into_owned()
        + &String::from_utf8_lossy(&keyed.stderr);
    assert!(keyed.status.success(), "{text}");
    assert!(text.contains("credential hashes keyed"), "{text}");
    assert!(!text.contains(key.trim()), "{text}");
    std::fs::write(&credentials, "c2hvcnQ=").unwrap();
    let bad = run(&["check", "--config", config.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&bad.stderr).into_owned() + &String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(64), "{text}");
    assert!(
        text.contains("store.encryption.credential_key_file") && text.contains("holds 5 bytes"),
        "{text}"
    );
}

/// Sealing is the proxy's, before any store: a sealed outcome replays on every backend,
/// Cluster and Sentinel included, and a replica without the key answers 409.
async fn sealed_replay_on_this_backend(backend: Backend) {
    let env = Env::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "k", 5);
    let p = IdemProcess::spawn(&config(&env, &[("k", &key)], "")).await;
    let first = charge(&p, "e1").await;
    assert_eq!(first.status, 201);
    let replay = charge(&p, "e1").await;
    assert!(replay.replayed(), "{} {}", replay.status, replay.text());
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("set-cookie"), None);
    assert_eq!(env.upstream.executions("charge:e1"), 1);
}

store_cases!([memory, redis_cluster, redis_sentinel][sealed_replay_on_this_backend]);
