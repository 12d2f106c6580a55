//! Safe at every edge, second round (issue 46), each against the idem binary (§3 in
//! `edges_http2.rs`, §5 in `edges_memory.rs`):
//! - §1 with `store.encryption`, a record in clear (a store writer without the key) is
//!   409 `record_unreadable`, unless `accept_unsealed_until` dates it from before; a
//!   replay never carries the credential headers, whatever the record holds;
//! - §3 idle HTTP/2 connections are closed, the admin listener speaks HTTP/1 only, and
//!   `server.http2: false` turns h2c off;
//! - §4 a stranger's 401/403/407 is not stored, so the owner's call still runs;
//! - §5 `server.max_buffered_bytes` bounds the bodies held at once (503 `overloaded`);
//! - §6 a path variant (trailing or repeated slash, `.` segment, encoded letter) of a
//!   protected route is protected, and a variant of a repeat is its replay;
//! - §7 on MCP routes, headers that disagree with the body are answered `-32020`, and a
//!   batch holding a protected call is refused;
//! - §8 a body with a duplicate JSON member is 400 `invalid_body` before any reservation.

use crate::support;

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use support::env::{Backend, Env};
use support::harness::{metric_sum, post, send, IdemProcess};
use support::upstream::MockUpstream;

const VICTIM: &str = "Bearer victim-t0ken";
const THIEF: &str = "Bearer thief-t0ken";

const CHARGE: &str = "routes:\n  - name: charge\n    path: /invoices/{invoice_id}/charge\n    key: \"charge:{path.invoice_id}\"\n";

/// The idem binary on the memory store in front of `upstream`: `server` holds the lines
/// of the `server:` section ("" for none), `timeout` is the upstream's, `rest` the
/// routes and what follows them.
pub(super) async fn on_memory(
    upstream: &MockUpstream,
    server: &str,
    timeout: &str,
    rest: &str,
) -> IdemProcess {
    let server = match server {
        "" => String::new(),
        lines => format!("server:\n{lines}"),
    };
    let yaml = format!(
        "{server}upstream:\n  url: {}\n  timeout: {timeout}\nstore:\n  backend: memory\n{rest}",
        upstream.url()
    );
    IdemProcess::spawn(&yaml).await
}

// === §1 unsealed records and replayed credential headers ===

/// `env`'s store with `encryption` (YAML under `store.encryption`, or none) and the
/// charge route.
fn sealed_config(env: &Env, encryption: Option<&str>) -> String {
    let store = env.base_yaml("5s");
    let store = match encryption {
        Some(enc) => store.replacen("store:\n", &format!("store:\n  encryption:\n{enc}"), 1),
        None => store,
    };
    format!("{store}default: reject\n{CHARGE}")
}

/// A key file in `dir`, as `store.encryption` lists it.
fn key_file(dir: &Path) -> String {
    let file = dir.join("k1");
    let key = base64::engine::general_purpose::STANDARD.encode([6u8; 32]);
    std::fs::write(&file, key).unwrap();
    format!(
        "    keys:\n      - {{id: \"k1\", file: \"{}\"}}\n",
        file.display()
    )
}

fn store_key(id: &str) -> idem::key::StoreKey {
    idem::key::StoreKey::new("charge", "", &format!("charge:{id}"))
}

fn redis_connection(env: &Env) -> ::redis::Connection {
    let Backend::Redis(server) = &env.backend else {
        unreachable!()
    };
    ::redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

async fn charge(p: &IdemProcess, id: &str) -> support::harness::Resp {
    let u = p.url(&format!("/invoices/{id}/charge"));
    post(&u, &[("authorization", VICTIM)], "{}").await
}

/// The admin listener's `/metrics` page.
pub(super) async fn metrics(p: &IdemProcess) -> String {
    send("GET", &p.admin_url("/metrics"), &[], "").await.text()
}

/// A record written in clear, as a store writer without the key (here: a replica with
/// no `store.encryption`) writes it, is never replayed by a replica with encryption on:
/// 409 `record_unreadable`, counted and logged with its store key hash, never executed
/// again. `accept_unsealed_until` after the record's creation reads it (a store that
/// was in clear before encryption was turned on); one before it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsealed_record_is_unreadable_while_encryption_is_on() {
    let env = Env::new(Backend::redis()).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = key_file(dir.path());
    let plain = IdemProcess::spawn(&sealed_config(&env, None)).await;
    let first = charge(&plain, "planted").await;
    assert_eq!(first.status, 201, "{}", first.text());
    drop(plain);

    let sealed = IdemProcess::spawn(&sealed_config(&env, Some(&keys))).await;
    let repeat = charge(&sealed, "planted").await;
    assert_eq!(repeat.status, 409, "{}", repeat.text());
    assert_eq!(repeat.code(), "record_unreadable");
    assert!(!repeat.replayed());
    assert_eq!(
        metric_sum(&metrics(&sealed).await, "idem_unreadable_records_total"),
        1.0
    );
    let hash = store_key("planted").to_string();
    assert!(sealed.logs().contains(&hash), "{}", sealed.logs());
    assert!(
        sealed.logs().contains("stored unsealed"),
        "{}",
        sealed.logs()
    );
    // New intents are sealed and replay as usual.
    assert_eq!(charge(&sealed, "fresh").await.status, 201);
    assert!(charge(&sealed, "fresh").await.replayed());
    drop(sealed);

    // Dated before the record: still unreadable.
    let before = format!("{keys}    accept_unsealed_until: 2020-01-01T00:00:00Z\n");
    let strict = IdemProcess::spawn(&sealed_config(&env, Some(&before))).await;
    assert_eq!(charge(&strict, "planted").await.status, 409);
    drop(strict);

    // Dated after the record (encryption turned on later): read as it is.
    let until =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(3600));
    let after = format!("{keys}    accept_unsealed_until: {until}\n");
    let accepting = IdemProcess::spawn(&sealed_config(&env, Some(&after))).await;
    let replay = charge(&accepting, "planted").await;
    assert!(replay.replayed(), "{}", replay.text());
    assert_eq!(replay.body, first.body);
    assert_eq!(env.upstream.executions("charge:planted"), 1);
}

/// A record whose headers were edited in the store to carry a `Set-Cookie`, an
/// `Authorization` or a route's `store_headers.exclude` header is replayed without them:
/// idem never stores those, so a record holding them was not written by idem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_never_carries_credential_headers_whatever_the_record_holds() {
    let env = Env::new(Backend::redis()).await;
    let yaml = format!(
        "{}default: reject\n{CHARGE}    store_headers: {{exclude: [x-session-token]}}\n",
        env.base_yaml("5s")
    );
    let p = IdemProcess::spawn(&yaml).await;
    let first = charge(&p, "cookie").await;
    assert_eq!(first.status, 201);
    let mut c = redis_connection(&env);
    let at = format!("idem:{}", store_key("cookie"));
    let stored: Vec<u8> = ::redis::cmd("GET").arg(&at).query(&mut c).unwrap();
    let stored = String::from_utf8(stored).unwrap();
    assert!(stored.contains("\"headers\":["), "{stored}");
    let planted = stored.replacen(
        "\"headers\":[",
        "\"headers\":[[\"set-cookie\",\"sid=planted\"],[\"authorization\",\"Bearer planted\"],\
         [\"www-authenticate\",\"Basic\"],[\"x-session-token\",\"planted\"],[\"x-kept\",\"yes\"],",
        1,
    );
    let _: () = ::redis::cmd("SET")
        .arg(&at)
        .arg(planted.as_bytes())
        .arg("KEEPTTL")
        .query(&mut c)
        .unwrap();
    let replay = charge(&p, "cookie").await;
    assert!(replay.replayed(), "{}", replay.text());
    assert_eq!(replay.header("x-kept"), Some("yes"), "the edit was read");
    for name in [
        "set-cookie",
        "authorization",
        "www-authenticate",
        "x-session-token",
    ] {
        assert_eq!(replay.header(name), None, "{name} replayed");
    }
}

// === §4 refusals about the caller are not stored ===

/// A stranger who sends the owner's intent with their own token gets the upstream's
/// 401/403/407; the owner's call then still runs (before, the owner got 403
/// `credential_mismatch` for the whole retention).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_refused_call_does_not_lock_the_owner_out() {
    let upstream = MockUpstream::start().await;
    let idem = on_memory(&upstream, "", "5s", CHARGE).await;
    for (n, status) in ["401", "403", "407"].into_iter().enumerate() {
        let u = idem.url(&format!("/invoices/inv_{n}/charge"));
        let stranger = post(
            &u,
            &[("authorization", THIEF), ("x-mock-status", status)],
            "{}",
        )
        .await;
        assert_eq!(stranger.status.to_string(), status);
        let owner = post(&u, &[("authorization", VICTIM)], "{}").await;
        assert_eq!(owner.status, 201, "{status}: {}", owner.text());
        assert!(!owner.replayed());
        let again = post(&u, &[("authorization", VICTIM)], "{}").await;
        assert!(again.replayed(), "the owner's success is stored");
        assert_eq!(upstream.executions(&format!("charge:inv_{n}")), 2);
    }
}

// === §6 path variants ===

/// With `default: passthrough`, variants of a protected path are matched by its route:
/// the first is forwarded with its path as sent, the others (and the plain path) replay
/// it. Case stays significant unless the route sets `path_case: insensitive`. A path that
/// names the route only once its encoded slashes are decoded is 400 `ambiguous_path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_variants_of_a_protected_route_are_protected() {
    let upstream = MockUpstream::start().await;
    let yaml = format!(
        "upstream:\n  url: {}\n  timeout: 5s\nstore:\n  backend: memory\ndefault: passthrough\n{CHARGE}\
         \x20 - name: refund\n    path: /refunds/{{id}}\n    path_case: insensitive\n    key: \"refund:{{path.id}}\"\n",
        upstream.url()
    );
    let idem = IdemProcess::spawn(&yaml).await;
    let first = post(&idem.url("/invoices/X/charge/"), &[], "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    for path in [
        "/invoices/X/charge",
        "//invoices/X/charge",
        "/./invoices/X/charge",
        "/invoices//X/./charge//",
        "/invoices/X/ch%61rge",
        "/%69nvoices/X/charge/",
    ] {
        let r = post(&idem.url(path), &[], "{}").await;
        assert!(r.replayed(), "{path}: {} {}", r.status, r.text());
        assert_eq!(r.body, first.body, "{path}");
    }
    assert_eq!(upstream.executions("charge:X"), 1);
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/invoices/X/charge/", "forwarded as sent");

    // Case is significant by default: another path, passed through (not protected).
    let upper = post(&idem.url("/INVOICES/X/charge"), &[], "{}").await;
    assert!(!upper.replayed());
    // … unless the route says otherwise.
    let refund = post(&idem.url("/refunds/r1"), &[], "{}").await;
    assert_eq!(refund.status, 201);
    let shouted = post(&idem.url("/REFUNDS/r1/"), &[], "{}").await;
    assert!(shouted.replayed(), "{}", shouted.text());
    assert_eq!(upstream.executions("refund:r1"), 1);

    // An encoded slash or backslash that, decoded, names the protected route (Starlette
    // decodes `%2F` before routing): refused, neither passed through nor keyed as it.
    for path in [
        "/invoices/Y%2Fcharge",
        "/invoices%2fY/charge",
        "/invoices/Y%5Ccharge",
    ] {
        let r = post(&idem.url(path), &[], "{}").await;
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.code(), "ambiguous_path", "{path}");
    }
    // One that names no protected route once decoded passes through as before.
    let other = post(&idem.url("/files/a%2Fb"), &[], "{}").await;
    assert_eq!(other.status, 201, "{}", other.text());
    assert_eq!(upstream.received().len(), 4, "charge, upper, refund, files");
}

/// `idem check` warns when `default: passthrough` sits beside protected routes.
#[test]
fn check_warns_about_passthrough_beside_protected_routes() {
    let dir = tempfile::tempdir().unwrap();
    let check = |default: &str| {
        let file = dir.path().join("idem.yaml");
        let yaml = format!("upstream:\n  url: http://127.0.0.1:3000\n{default}{CHARGE}");
        std::fs::write(&file, yaml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["check", "--config", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        text
    };
    for default in ["", "default: passthrough\n"] {
        let text = check(default);
        assert!(
            text.contains("passthrough beside protected routes"),
            "{text}"
        );
        assert!(text.contains("default: reject"), "{text}");
    }
    let text = check("default: reject\n");
    assert!(!text.contains("passthrough beside"), "{text}");
}

// === §8 duplicate JSON members ===

/// On routes that read the body, a duplicate member at any depth is 400 `invalid_body`
/// and nothing is reserved: the same intent sent unambiguously then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_with_a_duplicate_member_is_refused_before_any_reservation() {
    let upstream = MockUpstream::start().await;
    let yaml = format!(
        "upstream:\n  url: {}\n  timeout: 5s\nstore:\n  backend: memory\n{CHARGE}\
         \x20 - name: ticket\n    path: /tickets\n    key: \"ticket:{{body.customerId}}\"\n\
         \x20 - name: note\n    path: /notes/{{id}}\n    key: \"note:{{path.id}}\"\n    fingerprint: [method, path]\n",
        upstream.url()
    );
    let idem = IdemProcess::spawn(&yaml).await;
    for (path, body) in [
        ("/invoices/inv_1/charge", r#"{"amount":100,"amount":1}"#),
        (
            "/invoices/inv_1/charge",
            r#"{"lines":[{"sku":"a","qty":1,"qty":9}]}"#,
        ),
        ("/tickets", r#"{"customerId":"c1","customerId":"c2"}"#),
    ] {
        let r = post(&idem.url(path), &[], body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.code(), "invalid_body", "{body}");
        assert!(r.json()["detail"].as_str().unwrap().contains("twice"));
    }
    assert_eq!(upstream.total_executions(), 0);
    // Nothing was reserved: the unambiguous request runs (not a 409 or a 422).
    let ok = post(
        &idem.url("/invoices/inv_1/charge"),
        &[],
        r#"{"amount":100}"#,
    )
    .await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    let ok = post(&idem.url("/tickets"), &[], r#"{"customerId":"c1"}"#).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    // A route that reads neither key nor fingerprint from the body does not parse it.
    let note = post(&idem.url("/notes/n1"), &[], r#"{"a":1,"a":2}"#).await;
    assert_eq!(note.status, 201, "{}", note.text());
}

// === §7 MCP messages whose headers disagree with their body ===

const MCP: &str = "default: reject\nroutes:\n  - name: tools\n    path: /mcp\n    mcp: {tools: [charge_customer]}\n";

fn mcp_call(id: &str, tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"amount":100}}}}}}"#
    )
}

/// A `tools/call` of a protected tool whose `Mcp-Name` names an unprotected one (or whose
/// `Mcp-Method` says `ping`) is answered by idem with `-32020`, never forwarded; a batch
/// holding a protected call is refused with a tool error saying to send it alone; a
/// message with a duplicate member is refused, and so is a body idem cannot read.
/// Messages whose headers agree are forwarded as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_headers_that_disagree_with_the_body_are_answered_by_idem() {
    let upstream = MockUpstream::start().await;
    let idem = on_memory(&upstream, "", "5s", MCP).await;
    let u = idem.url("/mcp");
    let json = [("content-type", "application/json")];
    for headers in [
        [("mcp-method", "tools/call"), ("mcp-name", "lookup")],
        [("mcp-method", "ping"), ("mcp-name", "charge_customer")],
    ] {
        let mut all = json.to_vec();
        all.extend(headers);
        let r = post(&u, &all, &mcp_call("7", "charge_customer")).await;
        assert_eq!(r.status, 400, "{headers:?}: {}", r.text());
        let v = r.json();
        assert_eq!(v["id"], 7, "{v}");
        assert_eq!(v["error"]["code"], -32020, "{v}");
    }
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"ping"}},{}]"#,
        mcp_call("2", "charge_customer")
    );
    let r = post(&u, &json, &batch).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let answers = r.json();
    let call = answers
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == 2)
        .unwrap_or_else(|| panic!("{answers}"));
    assert_eq!(call["result"]["isError"], true, "{answers}");
    let text = call["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("charge_customer") && text.contains("of its own"),
        "{text}"
    );
    let dup = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_customer","name":"lookup","arguments":{}}}"#;
    let r = post(&u, &json, dup).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        v["result"]["structuredContent"]["code"], "invalid_body",
        "{v}"
    );
    // A body idem cannot read (NaN, nesting past 128 levels), which a lenient server
    // (the Python SDK's pydantic) would still run: JSON-RPC's parse error, never forwarded.
    let nan = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"charge_customer","arguments":{"amount":NaN}}}"#;
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"charge_customer","arguments":{{"amount":100}},"_meta":{{"x":{}{}}}}}}}"#,
        "[".repeat(150),
        "]".repeat(150)
    );
    for body in [nan.to_owned(), deep] {
        let r = post(&u, &json, &body).await;
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], -32700, "{v}");
        assert_eq!(v["id"], serde_json::Value::Null, "{v}");
    }
    assert_eq!(upstream.received().len(), 0, "nothing forwarded");

    // Headers that agree: forwarded.
    let mut agreeing = json.to_vec();
    agreeing.extend([("mcp-method", "tools/call"), ("mcp-name", "lookup")]);
    let r = post(&u, &agreeing, &mcp_call("8", "lookup")).await;
    assert_ne!(r.status, 400, "{}", r.text());
    assert_eq!(upstream.received().len(), 1);
}
