//! Sealed records bind what idem decides from (issue 32 §2), against the real stores:
//! - with `store.encryption`, a victim's sealed record whose credential hash (or
//!   fingerprint) was replaced in the store with an attacker's is 409
//!   `record_unreadable` for the attacker — never the victim's body, never a second
//!   execution, counted in `idem_unreadable_records_total`;
//! - with `store.encryption.credential_key_file`, a raw dump of the store holds no plain
//!   SHA-256 of a caller's credentials, and records stored before the key was set still
//!   replay to their caller;
//! - the raw key and scope of a sealed record are not in the store either, in any phase
//!   (in flight, unknown, completed), and the admin API shows them opened.

use crate::store_cases;
use crate::support;

use std::path::Path;

use base64::Engine;
use support::env::{Backend, Env};
use support::harness::{metric_sum, post, send, IdemProcess};

const MARKER: &str = "MARKER-victim-statement";
const VICTIM: &str = "Bearer victim-t0ken";
const THIEF: &str = "Bearer thief-t0ken";

fn config(env: &Env, dir: &Path) -> String {
    config_with(env, dir, false)
}

/// With `credential_key`, the credential hash is keyed.
fn config_with(env: &Env, dir: &Path, credential_key: bool) -> String {
    let file = dir.join("k1");
    let key = base64::engine::general_purpose::STANDARD.encode([6u8; 32]);
    std::fs::write(&file, key).unwrap();
    let mut encryption = format!(
        "  encryption:\n    keys:\n      - {{id: \"k1\", file: \"{}\"}}\n",
        file.display()
    );
    if credential_key {
        let file = dir.join("credentials");
        let key = base64::engine::general_purpose::STANDARD.encode([8u8; 32]);
        std::fs::write(&file, key).unwrap();
        encryption.push_str(&format!(
            "    credential_key_file: \"{}\"\n",
            file.display()
        ));
    }
    let store = env.base_yaml("5s");
    let store = store.replacen("store:\n", &format!("store:\n{encryption}"), 1);
    format!(
        "{store}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    fingerprint: [method, body]\n"
    )
}

async fn charge(p: &IdemProcess, id: &str, auth: &str, body: &str) -> support::harness::Resp {
    let u = p.url(&format!("/invoices/{id}/charge"));
    post(
        &u,
        &[("authorization", auth), ("x-mock-echo", MARKER)],
        body,
    )
    .await
}

fn store_key(id: &str) -> idem::key::StoreKey {
    idem::key::StoreKey::new("charge", "", &format!("charge:{id}"))
}

/// The stored bytes of `id`'s record.
fn read(env: &Env, id: &str) -> Vec<u8> {
    match &env.backend {
        Backend::Redis(server) => {
            let mut c = ::redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap();
            ::redis::cmd("GET")
                .arg(format!("idem:{}", store_key(id)))
                .query(&mut c)
                .unwrap()
        }
        Backend::Postgres(server) => {
            let hex = server.psql(&format!(
                "SELECT encode(record, 'hex') FROM idem_records WHERE key = '\\x{}'",
                store_key(id)
            ));
            hex::decode(hex.trim()).unwrap()
        }
        _ => unreachable!(),
    }
}

/// Overwrite `id`'s record with `bytes`, in the store itself (its TTL kept).
fn write(env: &Env, id: &str, bytes: &[u8]) {
    match &env.backend {
        Backend::Redis(server) => {
            let mut c = ::redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let _: () = ::redis::cmd("SET")
                .arg(format!("idem:{}", store_key(id)))
                .arg(bytes)
                .arg("KEEPTTL")
                .query(&mut c)
                .unwrap();
        }
        Backend::Postgres(server) => {
            server.psql(&format!(
                "UPDATE idem_records SET record = '\\x{}' WHERE key = '\\x{}'",
                hex::encode(bytes),
                store_key(id)
            ));
        }
        _ => unreachable!(),
    }
}

/// The value of a hex field (`"name":"…"`) in a stored record's metadata.
fn field(bytes: &[u8], name: &str) -> String {
    let text = String::from_utf8_lossy(bytes);
    let at = text.find(&format!("\"{name}\":\"")).unwrap() + name.len() + 4;
    text[at..at + 64].to_owned()
}

store_cases!([redis, postgres] [an_altered_credential_hash_or_fingerprint_is_unreadable,
    a_store_dump_holds_no_plain_credential_hash,
    records_in_flight_and_unknown_hold_no_raw_key_or_scope]);

/// The plain credential hash of a request carrying `Authorization: auth` (the default
/// `bind_credentials`), in hex as records and PostgreSQL's bytea text show it.
fn plain_credential_hash(auth: &str) -> String {
    let names: Vec<http::HeaderName> = ["authorization", "cookie", "x-api-key"]
        .iter()
        .map(|n| http::HeaderName::from_static(n))
        .collect();
    let mut headers = http::HeaderMap::new();
    headers.insert("authorization", auth.parse().unwrap());
    hex::encode(idem::key::credential_hash(&names, &headers))
}

/// Every key and value in the store, as text: Redis `SCAN` + `GET`, every PostgreSQL row
/// (its bytea columns as hex).
fn dump(env: &Env) -> String {
    match &env.backend {
        Backend::Redis(server) => {
            let mut c = ::redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let (mut cursor, mut keys) = (0u64, Vec::<String>::new());
            loop {
                let (next, batch): (u64, Vec<String>) =
                    ::redis::cmd("SCAN").arg(cursor).query(&mut c).unwrap();
                keys.extend(batch);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
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
        _ => unreachable!(),
    }
}

async fn a_store_dump_holds_no_plain_credential_hash(backend: Backend) {
    let env = Env::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let p = IdemProcess::spawn(&config_with(&env, dir.path(), true)).await;
    let first = charge(&p, "dumped", VICTIM, "{}").await;
    assert_eq!(first.status, 201);
    let raw = dump(&env);
    assert!(raw.contains("\"sealed\":\"k1\""), "{raw}");
    let plain = plain_credential_hash(VICTIM);
    assert!(!raw.contains(&plain), "the plain SHA-256 {plain} in {raw}");
    // The raw key is sealed too; the admin API opens it for display.
    assert!(!raw.contains("charge:dumped"), "the raw key in {raw}");
    let url = p.admin_url("/v1/keys/charge/charge%3Adumped");
    let shown = send("GET", &url, &[], "").await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    assert!(
        shown.text().contains("\"key\":\"charge:dumped\""),
        "{}",
        shown.text()
    );
    // A replica whose key does not open it names the sealing key and the key asked for.
    let other = tempfile::tempdir().unwrap();
    let yaml = config_with(&env, other.path(), false);
    let wrong = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    std::fs::write(other.path().join("k1"), wrong).unwrap();
    let keyless = IdemProcess::spawn(&yaml).await;
    let url = keyless.admin_url("/v1/keys/charge/charge%3Adumped");
    let shown = send("GET", &url, &[], "").await.text();
    assert!(shown.contains("\"sealed_with\":\"k1\""), "{shown}");
    assert!(shown.contains("\"key\":\"charge:dumped\""), "{shown}");
    let replay = charge(&p, "dumped", VICTIM, "{}").await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    let thief = charge(&p, "dumped", THIEF, "{}").await;
    assert_eq!(thief.status, 403);
    assert_eq!(env.upstream.executions("charge:dumped"), 1);
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

/// A record stored before the credential key was set (a plain hash) still replays to its
/// caller after it is set; records made since carry the keyed hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_from_before_the_credential_key_still_replay() {
    let env = Env::new(Backend::redis()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = IdemProcess::spawn(&config_with(&env, dir.path(), false)).await;
    let before = charge(&p, "before", VICTIM, "{}").await;
    let plain = plain_credential_hash(VICTIM);
    assert_eq!(field(&read(&env, "before"), "credentials"), plain);
    reload(&p, &config_with(&env, dir.path(), true), 2.0).await;
    let replay = charge(&p, "before", VICTIM, "{}").await;
    assert!(replay.replayed(), "{}", replay.text());
    assert_eq!(replay.body, before.body);
    assert_eq!(charge(&p, "before", THIEF, "{}").await.status, 403);
    assert_eq!(charge(&p, "after", VICTIM, "{}").await.status, 201);
    assert_ne!(field(&read(&env, "after"), "credentials"), plain);
    assert!(charge(&p, "after", VICTIM, "{}").await.replayed());
    assert_eq!(env.upstream.executions("charge:before"), 1);
    assert_eq!(env.upstream.executions("charge:after"), 1);
}

async fn an_altered_credential_hash_or_fingerprint_is_unreadable(backend: Backend) {
    let env = Env::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let p = IdemProcess::spawn(&config(&env, dir.path())).await;
    assert_eq!(charge(&p, "victim", VICTIM, "{}").await.status, 201);
    // The thief's own record tells it its credential hash and its request's fingerprint.
    assert_eq!(charge(&p, "decoy", THIEF, "{\"x\":1}").await.status, 201);
    let (victim, decoy) = (read(&env, "victim"), read(&env, "decoy"));
    for name in ["credentials", "fingerprint"] {
        let (theirs, mine) = (field(&victim, name), field(&decoy, name));
        assert_ne!(theirs, mine);
        let text = String::from_utf8_lossy(&victim).into_owned();
        let mut altered = victim.clone();
        let at = text.find(&theirs).unwrap();
        altered[at..at + 64].copy_from_slice(mine.as_bytes());
        if name == "fingerprint" {
            // Another request under the victim's key, its fingerprint put on the record
            // (the path is not fingerprinted here, so the decoy's is the one it has).
            write(&env, "victim", &altered);
            let r = charge(&p, "victim", VICTIM, "{\"x\":1}").await;
            assert_eq!((r.status, r.code().as_str()), (409, "record_unreadable"));
            continue;
        }
        write(&env, "victim", &altered);
        let r = charge(&p, "victim", THIEF, "{}").await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (409, "record_unreadable"),
            "{}",
            r.text()
        );
        assert!(
            !r.text().contains(MARKER),
            "the victim's body: {}",
            r.text()
        );
        // The victim's own repeat no longer matches the altered hash either.
        write(&env, "victim", &victim);
        assert!(charge(&p, "victim", VICTIM, "{}").await.replayed());
    }
    assert_eq!(env.upstream.executions("charge:victim"), 1, "never again");
    let metrics = send("GET", &p.admin_url("/metrics"), &[], "").await.text();
    assert_eq!(
        metric_sum(&metrics, "idem_unreadable_records_total"),
        2.0,
        "{metrics}"
    );
}

/// The route of [`config`], scoped by a header that carries personal data, whose
/// attempts are held as unknown outcomes when the upstream's answer is lost.
fn held_config(env: &Env, dir: &Path) -> String {
    let yaml = config(env, dir);
    format!(
        "{yaml}    scope: \"{{header.x-tenant}}\"\n    lease: 300ms\n    on_ambiguous: hold\n    on_unknown: hold\n"
    )
}

const TENANT: &str = "ada@example.com";

/// In flight and unknown, a record's raw key and scope are sealed as a completed one's
/// are (issue 32 §2): a dump of Redis or PostgreSQL taken while the call is in flight,
/// and again once its outcome is unknown, holds neither; the admin API opens them.
async fn records_in_flight_and_unknown_hold_no_raw_key_or_scope(backend: Backend) {
    let env = Env::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let p = IdemProcess::spawn(&held_config(&env, dir.path())).await;
    let url = p.url("/invoices/inflight/charge");
    let slow = tokio::spawn(async move {
        let headers = [
            ("x-tenant", TENANT),
            ("authorization", VICTIM),
            ("x-mock-delay-ms", "1500"),
        ];
        post(&url, &headers, "{}").await
    });
    let held = idem::key::StoreKey::new("charge", TENANT, "charge:inflight").to_string();
    let raw = support::poll::eventually(
        std::time::Duration::from_secs(5),
        "the call in flight",
        async || {
            let raw = dump(&env);
            raw.contains(&held).then_some(raw)
        },
    )
    .await;
    assert_no_identity(&raw, "inflight");
    let listed = send("GET", &p.admin_url("/v1/unknown?include=inflight"), &[], "").await;
    let text = listed.text();
    assert!(
        text.contains("\"key\":\"charge:inflight\"") && text.contains(TENANT),
        "{text}"
    );
    assert_eq!(slow.await.unwrap().status, 201);

    // The upstream's answer lost: the attempt stays, its lease ends, its outcome unknown.
    let u = p.url("/invoices/lost/charge");
    let headers = [("x-tenant", TENANT), ("x-mock-reset", "true")];
    let lost = post(&u, &headers, "{}").await;
    assert!(lost.status >= 500, "{}", lost.text());
    let unknown = support::poll::eventually(
        std::time::Duration::from_secs(5),
        "the outcome unknown",
        async || {
            let r = send("GET", &p.admin_url("/v1/unknown"), &[], "").await;
            let text = r.text();
            text.contains("\"key\":\"charge:lost\"").then_some(text)
        },
    )
    .await;
    assert!(unknown.contains(TENANT), "{unknown}");
    assert_no_identity(&dump(&env), "lost");
    let url = format!(
        "/v1/keys/charge/charge%3Alost?scope={}",
        "ada%40example.com"
    );
    let shown = send("GET", &p.admin_url(&url), &[], "").await.text();
    assert!(shown.contains("\"outcome_unknown\":true"), "{shown}");
    assert!(shown.contains("\"key\":\"charge:lost\""), "{shown}");
    assert_eq!(env.upstream.executions("charge:inflight"), 1);
}

/// Neither the raw key `charge:{id}` nor the scope is readable in a store dump.
fn assert_no_identity(raw: &str, id: &str) {
    assert!(raw.contains("\"sealed\":\"k1\""), "{raw}");
    let key = format!("charge:{id}");
    assert!(!raw.contains(&key), "the raw key {key} in {raw}");
    assert!(!raw.contains(TENANT), "the raw scope in {raw}");
    assert!(!raw.contains("ada%40"), "the raw scope in {raw}");
}
