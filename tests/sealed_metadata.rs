//! Sealed records bind what idem decides from (issue 32 §2), against the real stores:
//! - with `store.encryption`, a victim's sealed record whose credential hash (or
//!   fingerprint) was replaced in the store with an attacker's is 409
//!   `record_unreadable` for the attacker — never the victim's body, never a second
//!   execution, counted in `idem_unreadable_records_total`.

mod support;

use std::path::Path;

use base64::Engine;
use support::env::{Backend, Env};
use support::harness::{metric_sum, post, send, IdemProcess};

const MARKER: &str = "MARKER-victim-statement";
const VICTIM: &str = "Bearer victim-t0ken";
const THIEF: &str = "Bearer thief-t0ken";

fn config(env: &Env, dir: &Path) -> String {
    let file = dir.join("k1");
    let key = base64::engine::general_purpose::STANDARD.encode([6u8; 32]);
    std::fs::write(&file, key).unwrap();
    let store = env.base_yaml("5s");
    let encryption = format!(
        "  encryption:\n    keys:\n      - {{id: \"k1\", file: \"{}\"}}\n",
        file.display()
    );
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

store_cases!([redis, postgres][an_altered_credential_hash_or_fingerprint_is_unreadable]);

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
