//! The admin listener (SPEC §6): health, readiness, metrics after known traffic, key
//! inspection and release, the admin token, and the `idem keys` CLI.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{admin_url, post, send, try_send, url};
use support::poll::eventually;

const ROUTES: &str = r#"
routes:
  - name: charge
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
  - name: refund
    path: /refunds/{id}
    key: "refund:{path.id}"
    scope: "{header.x-tenant-id}"
"#;

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_after_known_traffic() {
    let env = Env::new(Backend::redis()).await;
    let idem = env.idem(ROUTES).await;
    assert_eq!(
        send("GET", &admin_url(&idem, "/healthz"), &[], "")
            .await
            .status,
        200
    );
    // Polled as a kubelet would: one probe may miss the store ping's 250 ms bound on a
    // loaded machine, which is what the probe's failure threshold is for.
    let ready = admin_url(&idem, "/readyz");
    eventually(Duration::from_secs(15), "/readyz 200", async || {
        try_send("GET", &ready, &[], "")
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    let u = url(&idem, "/invoices/m1/charge");
    post(&u, &[], "{}").await;
    post(&u, &[], "{}").await;
    post(&u, &[], "{}").await;
    post(&u, &[], r#"{"other":1}"#).await;
    let text = send("GET", &admin_url(&idem, "/metrics"), &[], "")
        .await
        .text();
    assert_eq!(
        metric(
            &text,
            r#"idem_requests_total{route="charge",outcome="forwarded"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            r#"idem_requests_total{route="charge",outcome="replayed"}"#
        ),
        2.0
    );
    assert_eq!(
        metric(
            &text,
            r#"idem_requests_total{route="charge",outcome="mismatch"}"#
        ),
        1.0
    );
    assert_eq!(metric(&text, "idem_inflight"), 0.0);
    assert_eq!(
        metric(&text, r#"idem_store_duration_seconds_count{op="reserve"}"#),
        4.0
    );
    assert_eq!(
        metric(&text, r#"idem_store_duration_seconds_count{op="complete"}"#),
        1.0
    );
    assert_eq!(metric(&text, "idem_upstream_duration_seconds_count"), 1.0);
    assert_eq!(metric(&text, "idem_stale_completions_total"), 0.0);
    assert_eq!(metric(&text, "idem_config_generation"), 1.0);

    // A classic scraper (no Accept) gets format 0.0.4; Prometheus, which asks for
    // OpenMetrics, gets it, with the same samples.
    let plain = send("GET", &admin_url(&idem, "/metrics"), &[], "").await;
    assert_eq!(
        plain.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(plain.text().contains("# TYPE idem_requests_total counter"));
    assert!(!plain.text().contains("# EOF"));
    let accept =
        "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let open = send(
        "GET",
        &admin_url(&idem, "/metrics"),
        &[("accept", accept)],
        "",
    )
    .await;
    assert_eq!(
        open.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(open.text().ends_with("# EOF\n"), "{}", open.text());
    assert_eq!(
        metric(
            &open.text(),
            r#"idem_requests_total{route="charge",outcome="replayed"}"#
        ),
        2.0
    );
}

/// A record in flight shows its lease's end (`lease_ends_at`) and, apart from it, its
/// own end (`expires_at`: the retention, which the record outlives its lease by), as
/// every store keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_record_shows_its_lease_and_its_own_end() {
    const SLOW: &str = "routes:\n  - name: charge\n    path: /invoices/{invoice_id}/charge\n    key: \"charge:{path.invoice_id}\"\n    lease: 30s\n    retention: 1h\n";
    for backend in [Backend::memory(), Backend::redis(), Backend::postgres()] {
        let env = Env::new(backend).await;
        let idem = env.idem_with_timeout(SLOW, "10s").await;
        let call = url(&idem, "/invoices/k1/charge");
        let running =
            tokio::spawn(async move { post(&call, &[("x-mock-delay-ms", "2000")], "{}").await });
        let path = admin_url(&idem, "/v1/keys/charge/charge%3Ak1");
        let v = eventually(Duration::from_secs(5), "the record in flight", async || {
            let r = send("GET", &path, &[], "").await;
            (r.status == 200).then(|| r.json())
        })
        .await;
        assert_eq!(v["state"], "in_progress", "{v}");
        let at = |field: &str| {
            let text = v[field]
                .as_str()
                .unwrap_or_else(|| panic!("no {field} in {v}"));
            humantime::parse_rfc3339(text).unwrap()
        };
        let created = at("created_at");
        let lease = at("lease_ends_at").duration_since(created).unwrap();
        let life = at("expires_at").duration_since(created).unwrap();
        assert!(
            lease > Duration::from_secs(25) && lease <= Duration::from_secs(31),
            "lease {lease:?}: {v}"
        );
        assert!(
            life > Duration::from_secs(3590) && life <= Duration::from_secs(3601),
            "record {life:?}: {v}"
        );
        assert_eq!(running.await.unwrap().status, 201);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_admin_shows_and_releases_records() {
    for backend in [Backend::memory(), Backend::redis(), Backend::postgres()] {
        let env = Env::new(backend).await;
        let idem = env.idem(ROUTES).await;
        post(&url(&idem, "/invoices/k1/charge"), &[], "{}").await;
        let r = send(
            "GET",
            &admin_url(&idem, "/v1/keys/charge/charge%3Ak1"),
            &[],
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["route"], "charge");
        assert_eq!(v["key"], "charge:k1");
        assert_eq!(v["state"], "completed");
        assert_eq!(v["attempt"], 1);
        assert_eq!(v["status"], 201);
        assert!(v["created_at"].as_str().unwrap().ends_with('Z'));
        assert!(v["expires_at"].as_str().unwrap() > v["created_at"].as_str().unwrap());
        assert!(v.get("body").is_none(), "the body only when asked for");
        let r = send(
            "GET",
            &admin_url(&idem, "/v1/keys/charge/charge%3Ak1?body=true"),
            &[],
            "",
        )
        .await;
        assert!(r.json()["body"].as_str().unwrap().contains("ch_"));
        assert_eq!(
            send("GET", &admin_url(&idem, "/v1/keys/charge/nope"), &[], "")
                .await
                .status,
            404
        );

        // Release after an incident: the next repeat is forwarded again.
        let r = send(
            "DELETE",
            &admin_url(&idem, "/v1/keys/charge/charge%3Ak1"),
            &[],
            "",
        )
        .await;
        assert_eq!(r.status, 204);
        assert_eq!(
            send(
                "DELETE",
                &admin_url(&idem, "/v1/keys/charge/charge%3Ak1"),
                &[],
                ""
            )
            .await
            .status,
            404
        );
        assert!(!post(&url(&idem, "/invoices/k1/charge"), &[], "{}")
            .await
            .replayed());

        // Scoped keys are addressed with ?scope=.
        post(&url(&idem, "/refunds/r1"), &[("x-tenant-id", "acme")], "{}").await;
        let r = send(
            "GET",
            &admin_url(&idem, "/v1/keys/refund/refund%3Ar1?scope=acme"),
            &[],
            "",
        )
        .await;
        assert_eq!(r.json()["scope"], "acme");
        assert_eq!(
            send(
                "GET",
                &admin_url(&idem, "/v1/keys/refund/refund%3Ar1"),
                &[],
                ""
            )
            .await
            .status,
            404
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_token_guards_key_admin_and_the_cli_uses_it() {
    let env = Env::new(Backend::memory()).await;
    let idem = env
        .idem(&format!("admin:\n  token: s3cret\n{ROUTES}"))
        .await;
    post(&url(&idem, "/invoices/t1/charge"), &[], "{}").await;
    let path = "/v1/keys/charge/charge%3At1";
    assert_eq!(
        send("GET", &admin_url(&idem, path), &[], "").await.status,
        401
    );
    let wrong = [("authorization", "Bearer nope")];
    assert_eq!(
        send("GET", &admin_url(&idem, path), &wrong, "")
            .await
            .status,
        401
    );
    let right = [("authorization", "Bearer s3cret")];
    assert_eq!(
        send("GET", &admin_url(&idem, path), &right, "")
            .await
            .status,
        200
    );
    // Health and metrics stay open for probes and scrapers.
    assert_eq!(
        send("GET", &admin_url(&idem, "/healthz"), &[], "")
            .await
            .status,
        200
    );

    let admin = format!("http://{}", idem.admin_addr);
    let cli = move |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_idem"));
        cmd.args(["keys"])
            .args(args)
            .args(["--admin", &admin, "--token", "s3cret"]);
        cmd.env_remove("IDEM_ADMIN_TOKEN");
        cmd.output().unwrap()
    };
    let out = tokio::task::spawn_blocking(move || {
        let get = cli(&["get", "--route", "charge", "charge:t1"]);
        let del = cli(&["delete", "--route", "charge", "charge:t1"]);
        let gone = cli(&["get", "--route", "charge", "charge:t1"]);
        (get, del, gone)
    })
    .await
    .unwrap();
    assert!(
        out.0.status.success(),
        "{}",
        String::from_utf8_lossy(&out.0.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.0.stdout).unwrap();
    assert_eq!(v["state"], "completed");
    assert!(out.1.status.success());
    assert!(!out.2.status.success(), "deleted keys are 404");
}
