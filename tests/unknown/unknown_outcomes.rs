//! Unknown outcomes (SPEC §1 "Unknown outcomes: resolved, never guessed"), across real
//! processes and real stores, against a mock upstream that does **not** deduplicate by
//! key: every forward is an execution. The owner is SIGKILLed while the upstream holds
//! its call; after the lease, a repeat on another replica gets what `on_unknown` says:
//! - `hold`: 409 `outcome_unknown` (no `Retry-After`), nothing forwarded, the record
//!   still there (remembered after its lease);
//! - `reconcile`: the upstream's records decide — found: a replay marked
//!   `Idempotent-Reconciled` and nothing forwarded; absent: forwarded once with the same
//!   key; a failing lookup: 409 with `Retry-After`, settled by a later repeat;
//! - `retry`: forwarded again with the same key within `upstream_key_window` less a lease,
//!   409 past it.
//!
//! The memory store gets there through an upstream timeout (`on_ambiguous: hold`).
//! A search lookup (`found_json`): its empty 200 is absent, not found.

use crate::store_cases;
use crate::support;

use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{post, send, try_send, IdemProcess};
use support::poll::eventually;

fn yaml(env: &Env, upstream_timeout: &str, route: &str) -> String {
    format!(
        "{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: 1s\n{route}",
        env.base_yaml(upstream_timeout)
    )
}

const RECONCILE: &str = "    on_unknown: reconcile\n    reconcile:\n      path: \"/lookup?key={key}\"\n      found: [200]\n      absent: [404]\n      timeout: 1s\n";

/// Starts a call through a fresh replica that the upstream holds for 8 s, SIGKILLs that
/// replica once the upstream has the call, and returns a second replica.
async fn killed_mid_call(env: &Env, config: &str, id: &str) -> IdemProcess {
    killed_mid_call_with(env, config, id, None).await
}

/// As [`killed_mid_call`], the call carrying `Authorization: authorization`.
async fn killed_mid_call_with(
    env: &Env,
    config: &str,
    id: &str,
    authorization: Option<&str>,
) -> IdemProcess {
    let mut owner = IdemProcess::spawn(config).await;
    let other = IdemProcess::spawn(config).await;
    let u = owner.url(&format!("/invoices/{id}/charge"));
    let auth = authorization.map(str::to_owned);
    tokio::spawn(async move {
        let mut headers = vec![("x-mock-delay-ms", "8000")];
        if let Some(auth) = auth.as_deref() {
            headers.push(("authorization", auth));
        }
        try_send("POST", &u, &headers, "{}").await
    });
    let key = format!("charge:{id}");
    eventually(
        Duration::from_secs(5),
        "the call reached the upstream",
        async || env.upstream.executions(&key) == 1,
    )
    .await;
    owner.kill();
    other
}

/// Repeats `id` through `p` (with `headers`) until it is no longer answered "in
/// progress", i.e. until the killed owner's lease has ended.
async fn repeat_after_the_lease(
    p: &IdemProcess,
    id: &str,
    headers: &[(&str, &str)],
) -> support::harness::Resp {
    let u = p.url(&format!("/invoices/{id}/charge"));
    eventually(Duration::from_secs(6), "the lease ended", async || {
        let r = post(&u, headers, "{}").await;
        let in_progress = r.status == 409 && r.code() == "request_in_progress";
        (!in_progress).then_some(r)
    })
    .await
}

store_cases!([redis, postgres] [hold_refuses_and_remembers_the_attempt,
    reconcile_found_replays_without_forwarding,
    reconcile_absent_forwards_once_with_the_same_key,
    reconcile_failure_is_409_then_settled_by_a_later_repeat,
    retry_forwards_again_within_the_window_only,
    a_retry_that_could_not_be_sent_keeps_the_first_send]);

async fn hold_refuses_and_remembers_the_attempt(backend: Backend) {
    let env = Env::new(backend).await;
    let config = yaml(&env, "10s", "    on_unknown: hold\n");
    let b = killed_mid_call(&env, &config, "h1").await;
    let r = repeat_after_the_lease(&b, "h1", &[]).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "outcome_unknown"),
        "{}",
        r.text()
    );
    assert!(
        r.header("retry-after").is_none(),
        "only a person settles it"
    );
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(
        detail.contains("Do not send it again with a different idempotency key"),
        "{detail}"
    );
    // Again, on a third replica: still refused, still one execution.
    let c = IdemProcess::spawn(&config).await;
    let again = post(&c.url("/invoices/h1/charge"), &[], "{}").await;
    assert_eq!(again.code(), "outcome_unknown");
    assert_eq!(env.upstream.executions("charge:h1"), 1);
    let record = send("GET", &c.admin_url("/v1/keys/charge/charge:h1"), &[], "").await;
    assert_eq!(
        record.json()["state"],
        "in_progress",
        "the attempt outlives its lease"
    );
}

async fn reconcile_found_replays_without_forwarding(backend: Backend) {
    let env = Env::new(backend).await;
    let config = yaml(&env, "10s", RECONCILE);
    let b = killed_mid_call_with(&env, &config, "f1", Some("Bearer sk_1")).await;
    let r = repeat_after_the_lease(&b, "f1", &[("authorization", "Bearer sk_1")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.replayed());
    assert_eq!(r.header("idempotent-reconciled"), Some("true"));
    assert_eq!(r.json()["found"], "charge:f1");
    assert_eq!(env.upstream.executions("charge:f1"), 1, "nothing forwarded");
    let metrics = send("GET", &b.admin_url("/metrics"), &[], "").await.text();
    let found = metrics
        .lines()
        .find(|l| l.starts_with("idem_reconciliations_total") && l.contains("result=\"found\""));
    // At least one: right at the lease's end PostgreSQL's clock may still give the
    // attempt a few ms (the takeover is refused, "in progress, retry in 1 s"), and the
    // repeat after that looks again.
    let counted = found.and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
    assert!(counted.is_some_and(|n| n >= 1), "{metrics}");
    let lookups: Vec<_> = env
        .upstream
        .received()
        .into_iter()
        .filter(|r| r.path.starts_with("/lookup"))
        .collect();
    assert!(
        !lookups.is_empty() && lookups.len() as u64 == counted.unwrap_or(0),
        "{lookups:?}"
    );
    assert_eq!(lookups[0].method, "GET");
    assert_eq!(lookups[0].path, "/lookup?key=charge:f1");
    assert_eq!(
        lookups[0].headers["authorization"], "Bearer sk_1",
        "the caller's credentials go along"
    );
    assert!(lookups[0].headers.get("idempotency-key").is_none());
    // Every replica replays the reconciled outcome from the store.
    let c = IdemProcess::spawn(&config).await;
    let again = post(
        &c.url("/invoices/f1/charge"),
        &[("authorization", "Bearer sk_1")],
        "{}",
    )
    .await;
    assert!(again.replayed());
    assert_eq!(again.header("idempotent-reconciled"), Some("true"));
    assert_eq!(again.body, r.body);
    assert_eq!(env.upstream.executions("charge:f1"), 1);
}

async fn reconcile_absent_forwards_once_with_the_same_key(backend: Backend) {
    let env = Env::new(backend).await;
    let config = yaml(&env, "10s", RECONCILE);
    let b = killed_mid_call(&env, &config, "a1").await;
    let absent = [("x-mock-lookup-status", "404")];
    let r = repeat_after_the_lease(&b, "a1", &absent).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(!r.replayed());
    assert_eq!(
        env.upstream.executions("charge:a1"),
        2,
        "forwarded once more"
    );
    let forwards: Vec<_> = env
        .upstream
        .received()
        .into_iter()
        .filter(|r| r.path == "/invoices/a1/charge")
        .collect();
    assert_eq!(forwards.len(), 2);
    assert_eq!(
        forwards[1].headers["idempotency-key"], "charge:a1",
        "the same upstream key"
    );
    let again = post(&b.url("/invoices/a1/charge"), &[], "{}").await;
    assert!(again.replayed());
    assert_eq!(again.body, r.body);
    assert_eq!(env.upstream.executions("charge:a1"), 2);
}

async fn reconcile_failure_is_409_then_settled_by_a_later_repeat(backend: Backend) {
    let env = Env::new(backend).await;
    let config = yaml(&env, "10s", RECONCILE);
    let b = killed_mid_call(&env, &config, "x1").await;
    let r = repeat_after_the_lease(&b, "x1", &[("x-mock-lookup-status", "503")]).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "outcome_unknown"),
        "{}",
        r.text()
    );
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(env.upstream.executions("charge:x1"), 1);
    // The lookup answers now: found. (Right at the lease's end the store's clock may
    // still give the attempt a few ms: then "in progress, retry in 1 s".)
    let u = b.url("/invoices/x1/charge");
    let later = eventually(Duration::from_secs(5), "settled", async || {
        let r = post(&u, &[], "{}").await;
        let in_progress = r.status == 409 && r.code() == "request_in_progress";
        (!in_progress).then_some(r)
    })
    .await;
    assert!(later.replayed(), "{} {}", later.status, later.text());
    assert_eq!(later.header("idempotent-reconciled"), Some("true"));
    assert_eq!(env.upstream.executions("charge:x1"), 1);
}

async fn retry_forwards_again_within_the_window_only(backend: Backend) {
    let env = Env::new(backend).await;
    let config = yaml(&env, "10s", "    upstream_key_window: 6s\n");
    // Inside the window: forwarded again, same key.
    let b = killed_mid_call(&env, &config, "r1").await;
    let r = repeat_after_the_lease(&b, "r1", &[]).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(env.upstream.executions("charge:r1"), 2);
    // Past the window less a lease (5 s after the first send: a retried call may leave
    // up to a lease after its takeover, and must reach the provider inside its 6 s):
    // held for a person. Nothing repeats it before (a repeat inside would be forwarded).
    // Before the margin, this repeat at 5.3 s was forwarded again.
    let c = killed_mid_call(&env, &config, "r2").await;
    tokio::time::sleep(Duration::from_millis(5_300)).await;
    let r = post(&c.url("/invoices/r2/charge"), &[], "{}").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "outcome_unknown"),
        "{}",
        r.text()
    );
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("too old to be sent again"), "{detail}");
    assert_eq!(
        env.upstream.executions("charge:r2"),
        1,
        "never sent again past the window"
    );
}

/// A repeat that takes an unknown outcome over (`retry`) through a replica whose
/// upstream refuses connections is never sent; it ends its lease instead of deleting
/// the record (the model's first finding), so the attempt stays an unknown outcome
/// with its first send: listed, and still refused past the key window. Before the fix
/// the record was deleted, and a later request reserved afresh and sent the key again.
async fn a_retry_that_could_not_be_sent_keeps_the_first_send(backend: Backend) {
    let env = Env::new(backend).await;
    let config = yaml(&env, "10s", "    upstream_key_window: 30s\n");
    let b = killed_mid_call(&env, &config, "n1").await;
    let dead = format!("http://127.0.0.1:{}", support::harness::free_port());
    let cut_off = IdemProcess::spawn(&config.replace(&env.upstream.url(), &dead)).await;
    let u = cut_off.url("/invoices/n1/charge");
    let r = eventually(Duration::from_secs(6), "the lease ended", async || {
        let r = post(&u, &[], "{}").await;
        (r.status != 409).then_some(r)
    })
    .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (502, "upstream_unavailable"),
        "{}",
        r.text()
    );
    let listed = send("GET", &b.admin_url("/v1/unknown"), &[], "").await;
    let unknown = &listed.json()["unknown"];
    assert_eq!(
        unknown.as_array().map(Vec::len),
        Some(1),
        "still an unknown outcome: {}",
        listed.text()
    );
    assert_eq!(unknown[0]["key"], "charge:n1");
    assert_eq!(env.upstream.executions("charge:n1"), 1);
}

/// The memory store's way to an unknown outcome: the upstream times out after the
/// request was sent, and `on_ambiguous: hold` keeps the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_timeout_is_an_unknown_outcome_settled_by_reconciliation() {
    let env = Env::new(Backend::memory()).await;
    let config = yaml(&env, "500ms", RECONCILE);
    let p = IdemProcess::spawn(&config).await;
    let u = p.url("/invoices/t1/charge");
    let first = post(&u, &[("x-mock-delay-ms", "3000")], "{}").await;
    assert_eq!(
        (first.status, first.code().as_str()),
        (504, "upstream_timeout")
    );
    let detail = first.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        detail.contains("asks the API whether it was executed"),
        "{detail}"
    );
    let r = repeat_after_the_lease(&p, "t1", &[]).await;
    assert!(r.replayed(), "{} {}", r.status, r.text());
    assert_eq!(r.header("idempotent-reconciled"), Some("true"));
    assert_eq!(env.upstream.executions("charge:t1"), 1);
}

const SEARCH: &str = "    on_unknown: reconcile\n    reconcile:\n      path: \"/search?key={key}\"\n      found: [200]\n      found_json: /data/0\n      absent: [200, 404]\n      timeout: 1s\n";

/// A search answers 200 whether it found the attempt or not: only an answer with the
/// attempt at `found_json` is its outcome; an empty one is absent, and the repeat is
/// forwarded (once, same key) instead of being answered `{"data": []}` forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_lookup_found_only_with_the_attempt_in_it() {
    let env = Env::new(Backend::memory()).await;
    let p = IdemProcess::spawn(&yaml(&env, "500ms", SEARCH)).await;
    for id in ["s.1", "s.2"] {
        let first = post(
            &p.url(&format!("/invoices/{id}/charge")),
            &[("x-mock-delay-ms", "3000")],
            "{}",
        )
        .await;
        assert_eq!(first.status, 504, "{}", first.text());
    }
    // s.1 executed and the search says so: its answer is the outcome.
    let found = repeat_after_the_lease(&p, "s.1", &[]).await;
    assert!(found.replayed(), "{} {}", found.status, found.text());
    assert_eq!(found.header("idempotent-reconciled"), Some("true"));
    assert_eq!(found.json()["data"][0]["key"], "charge:s.1");
    assert_eq!(
        env.upstream.executions("charge:s.1"),
        1,
        "nothing forwarded"
    );
    // s.2's search comes back empty: absent, so forwarded once more with its key.
    let empty = [("x-mock-search-empty", "true")];
    let absent = repeat_after_the_lease(&p, "s.2", &empty).await;
    assert_eq!(
        (absent.status, absent.replayed()),
        (201, false),
        "{}",
        absent.text()
    );
    assert_eq!(absent.json()["key"], "charge:s.2");
    assert_eq!(env.upstream.executions("charge:s.2"), 2);
    // The key went into the query whole, its dots encoded.
    let searched: Vec<_> = env
        .upstream
        .received()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.starts_with("/search"))
        .collect();
    assert!(
        searched.contains(&"/search?key=charge%3As%2E2".to_owned()),
        "{searched:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_timeout_held_is_refused() {
    let env = Env::new(Backend::memory()).await;
    let config = yaml(&env, "500ms", "    on_unknown: hold\n");
    let p = IdemProcess::spawn(&config).await;
    let u = p.url("/invoices/t2/charge");
    let first = post(&u, &[("x-mock-reset", "true")], "{}").await;
    assert_eq!(first.status, 504, "a reset after sending is ambiguous too");
    let r = repeat_after_the_lease(&p, "t2", &[]).await;
    assert_eq!((r.status, r.code().as_str()), (409, "outcome_unknown"));
    assert_eq!(env.upstream.executions("charge:t2"), 1);
}

/// Redis commands idem sent, by command, from `INFO commandstats`.
fn commands(redis: &support::redis::RedisServer) -> std::collections::BTreeMap<String, u64> {
    let info = redis.command(&["INFO", "commandstats"]);
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Round trips and writes between two readings. Every request-path command is a script
/// now (the reservation stamps the lease on the server's clock), and each script writes
/// the key at most once (`SET`): round trips are the `EVALSHA`s, the writes the `SET`s.
fn round_trips(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> (u64, u64) {
    let d =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    // A script's first call on a server is answered NOSCRIPT and sent again as `EVAL`:
    // a once-per-server extra, not a round trip of the protocol.
    let scripts = d("evalsha");
    (scripts, d("set"))
}

/// What settling an unknown outcome costs on Redis, counted from the server's own
/// command statistics: a retry takes one fenced write more than a fresh intent (its
/// reservation finds the attempt; the takeover; the completion); a reconciliation that
/// finds the outcome is one lookup upstream and one fenced write, and forwards nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_costs_one_fenced_write_on_redis() {
    let env = Env::new(Backend::redis()).await;
    let redis = env.backend.redis_server();
    let retry = yaml(&env, "10s", "    upstream_key_window: 1h\n");
    let b = killed_mid_call(&env, &retry, "m1").await;
    // Wait for the lease to end without repeating (a repeat would settle it).
    let key_url = b.admin_url("/v1/keys/charge/charge:m1");
    eventually(Duration::from_secs(6), "the lease ended", async || {
        send("GET", &key_url, &[], "").await.json()["outcome_unknown"] == true
    })
    .await;
    let before = commands(redis);
    let started = std::time::Instant::now();
    let r = post(&b.url("/invoices/m1/charge"), &[], "{}").await;
    let retried_in = started.elapsed();
    assert_eq!(r.status, 201);
    let retried = round_trips(&before, &commands(redis));
    // The reservation (the attempt is there: no write), the takeover and the completion.
    assert_eq!(retried, (3, 2), "(round trips, writes)");

    let fresh_before = commands(redis);
    let r = post(&b.url("/invoices/m-fresh/charge"), &[], "{}").await;
    assert_eq!(r.status, 201);
    let fresh = round_trips(&fresh_before, &commands(redis));
    assert_eq!(fresh, (2, 2), "(round trips, writes)");

    let reconcile = yaml(&env, "10s", RECONCILE);
    let c = killed_mid_call(&env, &reconcile, "m2").await;
    let key_url = c.admin_url("/v1/keys/charge/charge:m2");
    eventually(Duration::from_secs(6), "the lease ended", async || {
        send("GET", &key_url, &[], "").await.json()["outcome_unknown"] == true
    })
    .await;
    let before = commands(redis);
    let lookups_before = env.upstream.received().len();
    let started = std::time::Instant::now();
    let r = post(&c.url("/invoices/m2/charge"), &[], "{}").await;
    let reconciled_in = started.elapsed();
    assert!(r.replayed(), "{} {}", r.status, r.text());
    let reconciled = round_trips(&before, &commands(redis));
    assert_eq!(reconciled, (2, 1), "(round trips, writes)");
    assert_eq!(
        env.upstream.received().len() - lookups_before,
        1,
        "one lookup, nothing forwarded"
    );
    println!(
        "MEASURED settling on Redis, (round trips, writes): a fresh intent {fresh:?}; a retry \
         of an unknown outcome {retried:?} ({retried_in:?} with the upstream call); a reconciliation \
         that found it {reconciled:?} + 1 upstream lookup, nothing forwarded ({reconciled_in:?})"
    );
}
