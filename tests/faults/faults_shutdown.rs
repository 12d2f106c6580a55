//! Graceful shutdown of the real binary (issue 3, SPEC §6 "Signals"): SIGTERM/SIGINT
//! stop accepting, let in-flight calls finish and record within `shutdown_grace`, and
//! exit 0; a call still running at the deadline keeps its lease, which expires, so the
//! key stays safe.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::env::{Backend, Env};
use support::harness::{post, send, try_send, IdemProcess};
use support::poll::{eventually, eventually_blocking};

fn yaml(env: &Env, grace: &str, lease: &str) -> String {
    format!(
        "server:\n  shutdown_grace: {grace}\n{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: {lease}\n    upstream_key_window: 1h\n",
        env.base_yaml("10s")
    )
}

/// Waits (bounded) for the process to exit; returns its status and when it exited.
async fn exit_of(p: IdemProcess, within: Duration) -> (std::process::ExitStatus, Instant) {
    let (status, exited, _) = exit_and_logs_of(p, within).await;
    (status, exited)
}

/// [`exit_of`], with what the process logged.
async fn exit_and_logs_of(
    mut p: IdemProcess,
    within: Duration,
) -> (std::process::ExitStatus, Instant, String) {
    tokio::task::spawn_blocking(move || {
        let status = eventually_blocking(within, "idem exited", || p.child.try_wait().unwrap());
        (status, Instant::now(), p.logs())
    })
    .await
    .unwrap()
}

/// Starts a call through `p` that the upstream holds for `delay_ms`, and returns once
/// the upstream has it (so a signal sent next finds it in flight).
async fn in_flight(
    env: &Env,
    p: &IdemProcess,
    id: &str,
    delay_ms: &str,
) -> tokio::task::JoinHandle<Result<support::harness::Resp, String>> {
    let u = p.url(&format!("/invoices/{id}/charge"));
    let delay = delay_ms.to_owned();
    let call =
        tokio::spawn(
            async move { try_send("POST", &u, &[("x-mock-delay-ms", &delay)], "{}").await },
        );
    let key = format!("charge:{id}");
    eventually(
        Duration::from_secs(5),
        "the call reached the upstream",
        async || env.upstream.executions(&key) == 1,
    )
    .await;
    call
}

/// SIGTERM (what Kubernetes sends) or SIGINT with a call in flight: it finishes, is
/// recorded, and idem exits 0; another idem replays it.
async fn drains_the_call_in_flight_and_records_it(signal: &str) {
    let env = Env::new(Backend::redis()).await;
    let a = IdemProcess::spawn(&yaml(&env, "5s", "5s")).await;
    let inflight = in_flight(&env, &a, "sig", "700").await;
    a.signal(signal);
    let r = inflight
        .await
        .unwrap()
        .expect("the in-flight call was answered");
    assert_eq!(r.status, 201, "the in-flight call finished: {}", r.text());
    let (status, _) = exit_of(a, Duration::from_secs(5)).await;
    assert!(status.success(), "exit 0 after draining: {status:?}");
    let b = IdemProcess::spawn(&yaml(&env, "5s", "5s")).await;
    let again = post(&b.url("/invoices/sig/charge"), &[], "{}").await;
    assert!(again.replayed(), "the outcome was recorded before exit");
    assert_eq!(again.body, r.body);
    assert_eq!(env.upstream.executions("charge:sig"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_call_in_flight_and_records_it() {
    drains_the_call_in_flight_and_records_it("TERM").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_drains_the_call_in_flight_and_records_it() {
    drains_the_call_in_flight_and_records_it("INT").await
}

/// While draining: new connections are refused, an idle keep-alive connection is
/// closed, `/readyz` says "draining" (503) so the load balancer stops sending, and the
/// in-flight call still completes and is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_stops_accepting_and_reports_unready() {
    let env = Env::new(Backend::redis()).await;
    let a = IdemProcess::spawn(&yaml(&env, "5s", "5s")).await;
    // An idle keep-alive connection, opened before the signal.
    let mut idle = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    idle.write_all(b"GET /healthz-passthrough HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = idle.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 "),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );

    let inflight = in_flight(&env, &a, "drain", "3000").await;
    a.signal("TERM");
    // Unready, and still observable, while draining.
    let ready = eventually(Duration::from_secs(2), "unready", async || {
        let ready = try_send("GET", &a.admin_url("/readyz"), &[], "").await;
        let ready = ready.expect("the admin listener answers while draining");
        (ready.status == 503).then_some(ready)
    })
    .await;
    assert!(ready.text().contains("draining"), "{}", ready.text());
    let metrics = send("GET", &a.admin_url("/metrics"), &[], "").await.text();
    assert!(metrics.lines().any(|l| l == "idem_inflight 1"), "{metrics}");

    // Stops accepting.
    let refused = TcpStream::connect_timeout(
        &format!("127.0.0.1:{}", a.port).parse().unwrap(),
        Duration::from_millis(500),
    );
    assert!(
        refused.is_err(),
        "a new connection was accepted while draining"
    );
    // The idle keep-alive connection is closed now, not kept until idem exits after the
    // in-flight call: an order of events, not a clock (the call runs 3 s).
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    match idle.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("idle connection kept open: {e}"),
        Ok(n) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&buf[..n])),
    }
    assert!(
        !inflight.is_finished(),
        "idle connection kept open until the in-flight call ended"
    );

    let r = inflight
        .await
        .unwrap()
        .expect("the in-flight call was answered");
    assert_eq!(r.status, 201, "the in-flight call finished: {}", r.text());
    let (status, _) = exit_of(a, Duration::from_secs(5)).await;
    assert!(status.success(), "{status:?}");
    let b = IdemProcess::spawn(&yaml(&env, "5s", "5s")).await;
    assert!(post(&b.url("/invoices/drain/charge"), &[], "{}")
        .await
        .replayed());
}

/// A call still running when `shutdown_grace` ends: idem exits 0 at the deadline; the
/// caller's connection is closed (an error, never a fake success); the reservation is
/// left with its lease — repeats get 409 until it expires — and then exactly one retry
/// is forwarded, with the same upstream key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_past_the_grace_keeps_its_lease() {
    let env = Env::new(Backend::redis()).await;
    let a = IdemProcess::spawn(&yaml(&env, "500ms", "1500ms")).await;
    // The call is running upstream (not merely sent) before the drain starts.
    let inflight = in_flight(&env, &a, "late", "5000").await;
    let signalled = Instant::now();
    a.signal("TERM");
    let (status, exited, logs) = exit_and_logs_of(a, Duration::from_secs(10)).await;
    let drain = exited - signalled;
    assert!(status.success(), "{status:?}");
    assert!(
        drain >= Duration::from_millis(450),
        "left before the grace: {drain:?}"
    );
    // What `idle_drain_is_immediate` checks the absence of.
    assert!(
        logs.contains("drain did not finish within shutdown_grace"),
        "{logs}"
    );
    // The call runs 5 s: had idem waited for it past the grace, the caller would have
    // its 201. An outcome, not a clock, shows the grace was enforced.
    let caller = inflight.await.unwrap();
    assert!(
        caller.is_err(),
        "grace not enforced: the caller's exchange completed: {caller:?}"
    );

    let b = IdemProcess::spawn(&yaml(&env, "5s", "1500ms")).await;
    let held = send("GET", &b.admin_url("/v1/keys/charge/charge:late"), &[], "").await;
    assert_eq!(held.status, 200);
    assert_eq!(held.json()["state"], "in_progress");
    let u = b.url("/invoices/late/charge");
    assert_eq!(
        post(&u, &[], "{}").await.status,
        409,
        "held while the lease lasts"
    );
    let retried = eventually(Duration::from_secs(3), "the lease expired", async || {
        let r = post(&u, &[], "{}").await;
        (r.status != 409).then_some(r)
    })
    .await;
    assert_eq!(retried.status, 201, "{}", retried.text());
    assert!(!retried.replayed());
    assert_eq!(
        env.upstream.executions("charge:late"),
        2,
        "one retry, same upstream key"
    );
    assert!(post(&u, &[], "{}").await.replayed());
    println!("MEASURED shutdown at the deadline: exited {drain:?} after SIGTERM (grace 500 ms)");
}

/// With nothing in flight, a drain takes no time (idle keep-alive connections do not
/// hold it up to the grace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_drain_is_immediate() {
    let env = Env::new(Backend::redis()).await;
    let a = IdemProcess::spawn(&yaml(&env, "10s", "5s")).await;
    let mut idle = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    idle.write_all(b"GET /x HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 1024];
    let _ = idle.read(&mut buf).unwrap();
    // And a connection that sent nothing at all, accepted before the signal.
    let _silent = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    eventually(
        Duration::from_secs(2),
        "both connections counted",
        async || {
            let metrics = send("GET", &a.admin_url("/metrics"), &[], "").await.text();
            support::harness::metric_sum(&metrics, "idem_connections") == 2.0
        },
    )
    .await;
    let signalled = Instant::now();
    a.signal("TERM");
    let (status, exited, logs) = exit_and_logs_of(a, Duration::from_secs(12)).await;
    assert!(status.success());
    let drain = exited - signalled;
    // Idle connections held to the 10 s grace would end the drain at its deadline, which
    // idem reports; a drain that found nothing to wait for ends without it.
    assert!(
        !logs.contains("drain did not finish within shutdown_grace"),
        "the idle connections held the drain to the grace: {logs}"
    );
    println!("MEASURED idle drain: {drain:?}");
}
