use super::*;

fn guard(token: Option<&str>, allowed: &[&str], bound: &str) -> Guard {
    let config = AdminConfig {
        token: token.map(str::to_owned),
        allowed_hosts: allowed.iter().map(|h| h.to_string()).collect(),
        ..AdminConfig::default()
    };
    Guard::new(&config, bound.parse().unwrap())
}

fn req(method: &str, path: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut r = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(()).unwrap()
}

const LOCAL: &str = "127.0.0.1:50000";

fn code(refusal: Option<AdminResponse>) -> Option<String> {
    let r = refusal?;
    let body =
        futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(r.into_body()))
            .and_then(Result::ok)
            .map(|c| c.to_bytes())
            .unwrap_or_default();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    Some(json["code"].as_str().unwrap_or("no code").to_owned())
}

#[test]
fn hosts_are_loopback_names_ip_literals_or_listed() {
    let g = guard(None, &["idem-admin.internal"], "127.0.0.1:9901");
    let get = |host: &str| {
        code(g.check(
            &req("GET", "/v1/unknown", &[("host", host)]),
            LOCAL.parse().unwrap(),
        ))
    };
    for ok in [
        "127.0.0.1:9901",
        "localhost:9901",
        "LOCALHOST",
        "[::1]:9901",
        "10.0.0.7",
        "idem-admin.internal:9901",
        "app.localhost:9901",
        "a.b.LOCALHOST",
    ] {
        assert_eq!(get(ok), None, "{ok}");
    }
    for bad in [
        "evil.example:9901",
        "127.0.0.1.nip.io",
        "localhost.evil",
        "evillocalhost",
        ".localhost",
        "a..localhost",
        "localhost.",
        "u@127.0.0.1",
        "127.1",
        "",
    ] {
        assert_eq!(get(bad).as_deref(), Some("admin_host_refused"), "{bad:?}");
    }
    let none = g.check(&req("GET", "/v1/unknown", &[]), LOCAL.parse().unwrap());
    assert_eq!(
        code(none).as_deref(),
        Some("admin_host_refused"),
        "no Host at all"
    );
}

#[test]
fn writes_from_another_origin_are_refused() {
    let g = guard(None, &["ops.internal"], "127.0.0.1:9901");
    let write = |method: &str, origin: Option<&str>| {
        let mut headers = vec![("host", "127.0.0.1:9901")];
        headers.extend(origin.map(|o| ("origin", o)));
        code(g.check(
            &req(method, "/v1/keys/r/k", &headers),
            LOCAL.parse().unwrap(),
        ))
    };
    assert_eq!(write("DELETE", None), None, "the CLI sends no Origin");
    assert_eq!(
        write("DELETE", Some("http://127.0.0.1:9901")),
        None,
        "the console's own"
    );
    assert_eq!(
        write("POST", Some("http://ops.internal:8443")),
        None,
        "listed"
    );
    for other in [
        "http://evil.example",
        "http://127.0.0.1:8000",
        "http://127.0.0.1",
        "null",
        "garbage",
    ] {
        assert_eq!(
            write("POST", Some(other)).as_deref(),
            Some("admin_origin_refused"),
            "{other}"
        );
        assert_eq!(
            write("GET", Some(other)),
            None,
            "reads are not writes: {other}"
        );
    }
}

#[test]
fn an_exposed_listener_without_token_answers_loopback_peers_only() {
    let g = guard(None, &[], "0.0.0.0:9901");
    let from = |peer: &str| {
        code(g.check(
            &req("GET", "/", &[("host", "10.0.0.7:9901")]),
            peer.parse().unwrap(),
        ))
    };
    assert_eq!(from("127.0.0.1:40000"), None);
    assert_eq!(from("[::ffff:127.0.0.1]:40000"), None);
    assert_eq!(from("[::1]:40000"), None);
    assert_eq!(
        from("10.0.0.8:40000").as_deref(),
        Some("admin_token_required")
    );
}

#[test]
fn with_a_token_the_token_is_the_guard() {
    let g = guard(Some("s3cret"), &[], "0.0.0.0:9901");
    let far: SocketAddr = "10.0.0.8:40000".parse().unwrap();
    let evil = ("host", "evil.example");
    let bearer = ("authorization", "Bearer s3cret");
    assert_eq!(
        code(g.check(&req("GET", "/v1/unknown", &[evil, bearer]), far)),
        None
    );
    assert_eq!(
        code(g.check(&req("GET", "/", &[evil]), far)),
        None,
        "the page holds no data"
    );
    let wrong = ("authorization", "Bearer s3creT");
    assert_eq!(
        code(g.check(&req("GET", "/v1/unknown", &[wrong]), far)).as_deref(),
        Some("admin_token_invalid")
    );
}

#[test]
fn what_the_guard_covers() {
    for covered in [
        "/",
        "/v1/keys/r/k",
        "/v1/keys/r/k/resolve",
        "/v1/unknown",
        "/v1/unknown/resolve",
    ] {
        assert!(covers(covered), "{covered}");
    }
    for open in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/config",
        "/v1/unknownx",
    ] {
        assert!(!covers(open), "{open}");
    }
}
