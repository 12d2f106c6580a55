//! What each field becomes: defaults, inheritance, `${VAR}`, the no-config setup.

use std::time::Duration;

use http::Method;

use super::*;

#[test]
fn minimal_file_gets_every_default() {
    let c = ok(MINIMAL);
    assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(c.admin.listen.to_string(), "127.0.0.1:9901");
    assert_eq!(c.admin.token, None);
    assert_eq!(c.server.max_header_bytes, 64 * 1024);
    assert_eq!(c.server.shutdown_grace, Duration::from_secs(25));
    assert_eq!(c.upstream.timeout, Duration::from_secs(30));
    assert!(matches!(c.store.backend, StoreBackend::Memory));
    assert_eq!(c.store.op_timeout(), None);
    assert_eq!(c.default, DefaultAction::Passthrough);
    assert!(c.routes.is_empty());
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(c.warnings[0].contains("no routes"));
}

#[test]
fn route_inherits_defaults_and_overrides_them() {
    let c = ok(&format!(
        "{MINIMAL}defaults:\n  lease: 10s\n  retention: 1h\n  on_failure: retry\n  bind_credentials: [Authorization, X-Tenant]\n\
         routes:\n  - name: a\n    path: /a\n    key: \"{{header.x}}\"\n  - name: b\n    methods: [PUT]\n    path: /b/{{id}}\n    key: \"b:{{path.id}}\"\n    lease: 5s\n"
    ));
    let (a, b) = (&c.routes[0], &c.routes[1]);
    assert_eq!(
        a.methods,
        [Method::POST, Method::PUT, Method::PATCH, Method::DELETE]
    );
    assert_eq!(
        (a.lease, a.retention),
        (Duration::from_secs(10), Duration::from_secs(3600))
    );
    assert_eq!(a.on_failure, OnFailure::Retry);
    assert_eq!(a.bind_credentials[1].as_str(), "x-tenant");
    assert_eq!(b.methods, [Method::PUT]);
    assert_eq!(b.lease, Duration::from_secs(5));
    assert_eq!(b.retention, Duration::from_secs(3600));
    assert!(a.require_key);
    assert_eq!(a.max_key_length, 255);
    assert_eq!(a.forward_key_header.as_str(), "idempotency-key");
    assert_eq!(a.fingerprint, FingerprintSpec::default());
}

#[test]
fn every_route_field_is_read() {
    let c = ok(&route(
        "    key: [\"i:{path.id}\", \"{header.idempotency-key}\"]\n    require_key: false\n    max_key_length: 64\n\
         \x20   scope: \"{header.x-tenant-id}\"\n    fingerprint: {body: [amount, customer.id]}\n    store_statuses: [2xx, 404]\n\
         \x20   lease: 1m\n    retention: 1h30m\n    on_concurrent: wait\n    wait_timeout: 3s\n    on_ambiguous: release\n\
         \x20   max_request_bytes: 64KiB\n    max_response_bytes: 2MB\n    forward_key_header: PayPal-Request-Id\n\
         \x20   forward_key_format: sf-string\n",
    ));
    let r = &c.routes[0];
    assert_eq!(r.key.len(), 2);
    assert!(!r.require_key);
    assert_eq!(r.max_key_length, 64);
    assert_eq!(r.scope.as_str(), "{header.x-tenant-id}");
    let BodyFingerprint::Fields(fields) = &r.fingerprint.body else {
        panic!()
    };
    assert_eq!(fields.len(), 2);
    assert!(r.fingerprint.method && r.fingerprint.path);
    assert!(r.store_statuses.contains(204) && r.store_statuses.contains(404));
    assert!(!r.store_statuses.contains(402));
    assert_eq!(r.retention, Duration::from_secs(5400));
    assert_eq!(
        (r.on_concurrent, r.wait_timeout),
        (OnConcurrent::Wait, Duration::from_secs(3))
    );
    assert_eq!(r.on_ambiguous, OnAmbiguous::Release);
    assert_eq!(
        (r.max_request_bytes, r.max_response_bytes),
        (65_536, 2_000_000)
    );
    assert_eq!(r.forward_key_header.as_str(), "paypal-request-id");
    assert_eq!(r.forward_key_format, KeyFormat::SfString);
    assert!(other_warnings(&c).is_empty(), "{:?}", c.warnings);
}

#[test]
fn fingerprint_list_form_is_a_subset() {
    let c = ok(&route("    key: \"{path.id}\"\n    fingerprint: [body]\n"));
    let fp = &c.routes[0].fingerprint;
    assert!(!fp.method && !fp.path && fp.body == BodyFingerprint::Whole);
    has(&errors(&route("    key: \"{path.id}\"\n    fingerprint: [headers]\n")), "7:19 routes[0].fingerprint[0]: invalid value \"headers\"; valid values: method, path, body");
    has(
        &errors(&route(
            "    key: \"{path.id}\"\n    fingerprint: {body: []}\n",
        )),
        "routes[0].fingerprint.body: list at least one body field",
    );
    has(
        &errors(&route("    key: \"{path.id}\"\n    fingerprint: body\n")),
        "expected a list such as [method, path, body]",
    );
}

#[test]
fn environment_variables_expand_in_values() {
    let c = ok(&format!(
        "{MINIMAL}store:\n  backend: redis\n  redis:\n    url: redis://:${{REDIS_PASSWORD}}@10.0.0.1:6379/0\n\
         admin:\n  token: ${{IDEM_ADMIN_TOKEN:-}}\ndefaults:\n  lease: ${{LEASE:-30s}}\n"
    ));
    let StoreBackend::Redis(r) = &c.store.backend else {
        panic!("redis: {:?}", c.store.backend)
    };
    let url = "redis://:hunter2@10.0.0.1:6379/0".to_owned();
    assert_eq!(r.mode, RedisMode::Standalone { url });
    assert_eq!(r.op_timeout, Duration::from_millis(250));
    assert_eq!(c.admin.token, None, "an empty token is no token");
    assert!(c.warnings.iter().all(|w| !w.contains("hunter2")));
    let e = errors(&format!("{MINIMAL}admin:\n  token: ${{IDEM_TOKEN}}\n"));
    assert_eq!(e, ["4:10 admin.token: environment variable IDEM_TOKEN is not set; set it, or give a default with ${IDEM_TOKEN:-default}"]);
}

#[test]
fn admin_allowed_hosts_are_dns_names() {
    assert!(ok(MINIMAL).admin.allowed_hosts.is_empty());
    let c = ok(&format!(
        "{MINIMAL}admin:\n  allowed_hosts: [Idem-Admin.internal, idem]\n"
    ));
    assert_eq!(c.admin.allowed_hosts, ["idem-admin.internal", "idem"]);
    let e = errors(&format!(
        "{MINIMAL}admin:\n  allowed_hosts: [\"*.example.com\", \"idem:9901\", http://idem, \"\"]\n"
    ));
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(
        e[0].contains("admin.allowed_hosts[0]: invalid host \"*.example.com\": no wildcards"),
        "{e:?}"
    );
    assert!(
        e[1].contains(
            "admin.allowed_hosts[1]: invalid host \"idem:9901\": a DNS name without scheme or port"
        ),
        "{e:?}"
    );
}

#[test]
fn every_redis_field_is_read() {
    let c = ok(&format!(
        "{MINIMAL}store:\n  backend: redis\n  redis:\n    mode: sentinel\n{}{}{}{}{}",
        "    url: rediss://idem:${REDIS_PASSWORD}@ignored/0\n",
        "    nodes: [\"redis://10.0.0.1:26379\", \"redis://10.0.0.2:26379\"]\n",
        "    sentinel_master: payments\n",
        "    wait_replicas: 1\n",
        "    tls: {ca_file: /etc/idem/ca.pem}\n"
    ));
    let StoreBackend::Redis(r) = &c.store.backend else {
        panic!("redis: {:?}", c.store.backend)
    };
    let RedisMode::Sentinel {
        url,
        sentinels,
        master,
    } = &r.mode
    else {
        panic!("sentinel: {:?}", r.mode)
    };
    assert_eq!(url, "rediss://idem:hunter2@ignored/0");
    assert_eq!(sentinels.len(), 2);
    assert_eq!(master, "payments");
    assert_eq!(r.wait_replicas, 1);
    assert_eq!(
        r.tls_ca_file.as_deref(),
        Some(std::path::Path::new("/etc/idem/ca.pem"))
    );
    let table = c.route_table();
    assert!(
        table.contains("redis sentinel \"payments\" (2 sentinels) wait_replicas 1"),
        "{table}"
    );
    assert!(!table.contains("hunter2"), "the password is never printed");
}

#[test]
fn for_upstream_is_the_no_config_setup() {
    let c = Config::for_upstream("http://127.0.0.1:3000").unwrap();
    assert_eq!(c.upstream.url.to_string(), "http://127.0.0.1:3000/");
    assert!(matches!(c.store.backend, StoreBackend::Memory));
    let r = &c.routes[0];
    assert_eq!(r.name, "default");
    assert_eq!(
        r.methods,
        [Method::POST, Method::PUT, Method::PATCH, Method::DELETE]
    );
    assert_eq!(r.path.as_str(), "/{path*}");
    assert!(r.path.matches("/any/depth/here").is_some());
    assert_eq!(r.key[0].as_str(), "{header.idempotency-key}");
    assert!(!r.require_key);
    let e = Config::for_upstream("localhost:3000").unwrap_err();
    assert!(
        e.to_string().starts_with("upstream.url: invalid URL"),
        "{e}"
    );
}

#[test]
fn route_table_lists_routes_then_warnings() {
    let c = ok(&format!("{MINIMAL}routes:\n  - {{name: mail, path: /m, key: [\"{{header.a}}\", \"{{header.b}}\"], on_concurrent: wait, retention: 1h30m, lease: 500ms}}\n"));
    let table = c.route_table();
    assert!(
        table.contains("upstream http://127.0.0.1:3000\n"),
        "{table}"
    );
    assert!(
        table
            .contains("mail   POST,PUT,PATCH,DELETE  /m    {header.a}  500ms  1h30m      wait 10s"),
        "{table}"
    );
    assert!(
        table.contains("\n                                    {header.b}\n"),
        "{table}"
    );
    assert!(
        table.contains("1 route, 2 warnings\nwarning: t.yaml:"),
        "{table}"
    );
}

/// What a repeat after an unknown outcome gets is in the table: `on_unknown` and the
/// provider's key window, `-` when there is none.
#[test]
fn route_table_shows_on_unknown_and_the_key_window() {
    let c = ok(&format!("{MINIMAL}routes:\n  - {{name: pay, path: /p, key: \"{{header.a}}\", on_unknown: hold, upstream_key_window: 24h}}\n  - {{name: mail, path: /m, key: \"{{header.a}}\"}}\n"));
    let table = c.route_table();
    let lines: Vec<&str> = table.lines().collect();
    let header = lines.iter().find(|l| l.starts_with("ROUTE")).unwrap();
    assert!(
        header.ends_with("ON_AMBIGUOUS  ON_UNKNOWN  UPSTREAM_KEY_WINDOW"),
        "{table}"
    );
    let row = |name: &str| *lines.iter().find(|l| l.starts_with(name)).unwrap();
    assert!(row("pay ").ends_with("hold        24h"), "{table}");
    assert!(row("mail ").ends_with("hold        -"), "{table}");
}

/// The fuzz target's promise: no input panics. Every prefix of a full file, and the file
/// with each byte replaced by characters that matter to YAML and templates.
#[test]
fn no_input_panics() {
    let text = std::fs::read_to_string("config/idem.yaml").unwrap();
    for end in (0..=text.len())
        .step_by(3)
        .filter(|i| text.is_char_boundary(*i))
    {
        let _ = load(&text[..end]);
    }
    let bytes = text.as_bytes();
    for i in (0..bytes.len()).step_by(13) {
        for c in [
            b'{', b'}', b'[', b':', b'-', b'\n', b'$', b'&', b'*', b'"', b' ',
        ] {
            let mut mutated = bytes.to_vec();
            mutated[i] = c;
            if let Ok(s) = String::from_utf8(mutated) {
                let _ = load(&s);
            }
        }
    }
}

/// Random documents from the tokens that matter, deterministically (a tiny LCG), so the
/// walk meets shapes no real file has: keys in odd places, aliases, unclosed templates.
#[test]
fn token_soup_never_panics() {
    const TOKENS: [&str; 32] = [
        "routes:",
        "\n",
        "  - ",
        "    ",
        "name: a",
        "key: ",
        "{",
        "}",
        "${X",
        "${X:-1s}",
        "[",
        "]",
        ": ",
        "&a ",
        "*a",
        "path: /",
        "{path*}",
        "{path.id}",
        "lease: ",
        "30s",
        "\"",
        "'",
        "# c",
        "? ",
        "!!str ",
        "defaults:",
        "fingerprint: {body: [",
        "upstream: {url: http://x}",
        "store_statuses: [",
        "é",
        "-",
        ", ",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) as usize
    };
    for _ in 0..1500 {
        let len = next() % 40;
        let doc: String = (0..len).map(|_| TOKENS[next() % TOKENS.len()]).collect();
        let _ = load(&doc);
    }
}

#[test]
fn workers_are_auto_or_a_count() {
    let auto = ok(MINIMAL);
    assert_eq!(auto.server.workers, None);
    assert!(auto.server.worker_count() >= 1);
    let four = ok(&format!("{MINIMAL}server:\n  workers: 4\n"));
    assert_eq!(
        (four.server.workers, four.server.worker_count()),
        (Some(4), 4)
    );
    assert_eq!(
        ok(&format!("{MINIMAL}server:\n  workers: auto\n"))
            .server
            .workers,
        None
    );
    for bad in ["0", "257", "two", "-1"] {
        let e = errors(&format!("{MINIMAL}server:\n  workers: {bad}\n"));
        assert!(
            e.len() == 1 && e[0].contains("server.workers: invalid value"),
            "{bad}: {e:?}"
        );
    }
}
