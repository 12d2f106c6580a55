//! Each validation rule: the error or warning it gives, and the place it names.

use super::*;

#[test]
fn errors_name_line_column_and_path() {
    let text = format!("{MINIMAL}routes:\n  - name: a\n    path: /a\n    key: \"{{header.x}}\"\n    on_concurrent: wiat\n");
    let e = load(&text).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.yaml:7:20: routes[0].on_concurrent: invalid value \"wiat\"; valid values: conflict, wait"
    );
}

#[test]
fn all_errors_come_out_at_once() {
    let e = errors(
        "listen: nope\nupstream:\n  url: ftp://x\n  timeot: 3s\nserver:\n  max_header_bytes: 64Kb2\n\
         routes:\n  - name: a\n    path: /a/{id}\n    key: \"x:{path.idd}\"\n    lease: 30\n  - name: a\n    path: /b\n  - path: /c\n    key: \"k{\"\n",
    );
    assert_eq!(e.len(), 10, "{e:#?}");
    has(&e, "1:9 listen: invalid address");
    has(
        &e,
        "3:8 upstream.url: invalid URL \"ftp://x\": the scheme must be http or https",
    );
    has(
        &e,
        "4:3 upstream.timeot: unknown field \"timeot\"; did you mean \"timeout\"?",
    );
    has(&e, "6:21 server.max_header_bytes: invalid size");
    has(&e, "10:10 routes[0].key: placeholder {path.idd} names no capture of the route's path \"/a/{id}\"; its captures: id");
    has(
        &e,
        "11:12 routes[0].lease: invalid duration \"30\": a duration needs a unit",
    );
    has(
        &e,
        "12:11 routes[1].name: duplicate route name \"a\" (first used at line 8)",
    );
    has(&e, "12:5 routes[1].key: missing");
    has(&e, "14:5 routes[2].name: missing");
    has(&e, "15:10 routes[2].key: invalid template \"k{\"");
}

#[test]
fn syntax_errors_have_a_place() {
    let e = errors("upstream:\n  url: [http://x\nroutes: 1\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("invalid YAML"), "{e:?}");
    assert!(!e[0].starts_with('-'), "{e:?}");
    has(&errors("- a\n- b\n"), "1:1 : expected a map, found a list");
}

#[test]
fn lease_must_be_shorter_than_retention() {
    let e = errors(&route(
        "    key: \"{path.id}\"\n    lease: 2h\n    retention: 1h\n",
    ));
    has(
        &e,
        "7:12 routes[0].lease: lease (2h) must be shorter than retention (1h",
    );
    // Inherited lease, route-local retention: the route's own line is blamed.
    let e = errors(&format!("{MINIMAL}defaults:\n  lease: 1m\nroutes:\n  - name: r\n    path: /r\n    key: k{{method}}\n    retention: 30s\n"));
    has(&e, "9:16 routes[0].retention: lease (1m) must be shorter than retention (30s) in route \"r\"; the other value is from defaults.lease");
    // Both in defaults: reported once, not once per route.
    let e = errors(&format!("{MINIMAL}defaults:\n  lease: 1h\n  retention: 1h\nroutes:\n  - {{name: a, path: /a, key: \"{{method}}\"}}\n  - {{name: b, path: /b, key: \"{{method}}\"}}\n"));
    assert_eq!(e.len(), 1, "{e:#?}");
}

#[test]
fn route_needs_name_path_and_key() {
    let e = errors(&format!("{MINIMAL}routes:\n  - methods: [POST]\n"));
    has(&e, "4:5 routes[0].name: missing");
    has(&e, "4:5 routes[0].path: missing");
    has(&e, "4:5 routes[0].key: missing");
    has(
        &errors(&route("    key: []\n")),
        "routes[0].key: list at least one key alternative",
    );
    has(
        &errors(&route("    key: \"\"\n")),
        "routes[0].key: an empty key alternative",
    );
    has(
        &errors(&format!(
            "{MINIMAL}routes:\n  - name: r\n    path: /a/{{\n    key: \"{{method}}\"\n"
        )),
        "5:11 routes[0].path: invalid path: ",
    );
    has(
        &errors(&format!(
            "{MINIMAL}routes:\n  - {{name: \"a b\", path: /a, key: \"k{{method}}\"}}\n"
        )),
        "routes[0].name: invalid route name",
    );
}

#[test]
fn scope_placeholders_are_checked_against_the_path() {
    has(
        &errors(&route(
            "    key: \"{path.id}\"\n    scope: \"{path.tenant}\"\n",
        )),
        "routes[0].scope: placeholder {path.tenant}",
    );
}

#[test]
fn methods_statuses_and_headers() {
    has(
        &errors(&route("    key: \"{path.id}\"\n    methods: [post]\n")),
        "routes[0].methods[0]: invalid method \"post\"; methods are case-sensitive, write \"POST\"",
    );
    has(
        &errors(&route("    key: \"{path.id}\"\n    methods: []\n")),
        "list at least one method",
    );
    has(
        &errors(&route(
            "    key: \"{path.id}\"\n    store_statuses: [2xx, 6xx]\n",
        )),
        "routes[0].store_statuses[1]: invalid status \"6xx\"",
    );
    has(
        &errors(&route(
            "    key: \"{path.id}\"\n    forward_key_header: \"bad header\"\n",
        )),
        "invalid header name",
    );
    has(
        &errors(&route(
            "    key: \"{path.id}\"\n    bind_credentials: [\"a b\"]\n",
        )),
        "routes[0].bind_credentials[0]: invalid header name",
    );
    has(
        &errors(&route("    key: \"{path.id}\"\n    max_key_length: 0\n")),
        "routes[0].max_key_length: must be greater than 0",
    );
}

#[test]
fn warnings_do_not_fail_the_load() {
    let c = ok(&route("    key: \"{path.id}\"\n    wait_timeout: 5s\n    lease: 500ms\n    store_statuses: [2xx, 5xx, 429]\n"));
    let all = c.warnings.join("\n");
    assert!(
        all.contains("t.yaml:7:19: routes[0].wait_timeout: ignored: on_concurrent is conflict"),
        "{all}"
    );
    assert!(
        all.contains("routes[0].lease: lease 500ms is under 1s"),
        "{all}"
    );
    assert!(
        all.contains("routes[0].store_statuses[1]: storing 5xx"),
        "{all}"
    );
    assert!(
        all.contains("routes[0].store_statuses[2]: 429 is never stored"),
        "{all}"
    );
    let c = ok(&route(
        "    key: \"{path.id}\"\n    wait_timeout: 5s\n    on_concurrent: wait\n",
    ));
    assert!(other_warnings(&c).is_empty(), "{:?}", c.warnings);
}

#[test]
fn defaults_wait_timeout_warns_only_when_nobody_waits() {
    let text = |oc: &str| {
        format!("{MINIMAL}defaults:\n  wait_timeout: 5s\nroutes:\n  - {{name: a, path: /a, key: \"{{method}}\", on_concurrent: {oc}}}\n")
    };
    assert!(other_warnings(&ok(&text("wait"))).is_empty());
    assert!(other_warnings(&ok(&text("conflict")))[0].contains("defaults.wait_timeout: ignored"));
}

#[test]
fn literal_key_and_shadowed_route_warn() {
    let c = ok(&format!("{MINIMAL}routes:\n  - {{name: a, path: /a, key: fixed}}\n  - {{name: b, path: /a, methods: [POST], key: \"{{method}}\"}}\n"));
    let all = c.warnings.join("\n");
    assert!(
        all.contains("routes[0].key: \"fixed\" has no placeholder"),
        "{all}"
    );
    assert!(
        all.contains("routes[1].path: never matches: route \"a\" (line 4)"),
        "{all}"
    );
}

#[test]
fn sections_are_validated() {
    has(&errors("listen: 1.2.3.4:80\n"), "upstream: missing");
    has(
        &errors("upstream: {timeout: 1s}\n"),
        "1:11 upstream.url: missing",
    );
    has(
        &errors(&format!(
            "{MINIMAL}store:\n  backend: redis\n  redis:\n    mode: sentinel\n"
        )),
        "store.redis.nodes: sentinel mode needs",
    );
    has(
        &errors(&format!(
            "{MINIMAL}store:\n  backend: redis\n  redis:\n    url: http://x\n"
        )),
        "store.redis.url: invalid Redis URL",
    );
    has(
        &errors(&format!(
            "{MINIMAL}store:\n  backend: redis\n  redis:\n    mode: cluster\n    nodes: [\"redis://h:1\"]\n    key_prefix: \"a{{b}}:\"\n"
        )),
        "store.redis.key_prefix: in cluster mode the key prefix must not contain",
    );
    has(
        &errors(&format!(
            "{MINIMAL}store:\n  backend: redis\n  redis:\n    tls: {{ca: x}}\n"
        )),
        "store.redis.tls",
    );
    has(
        &errors(&format!("{MINIMAL}store: {{backend: disk}}\n")),
        "invalid value \"disk\"; valid values: memory, redis",
    );
    has(
        &errors(&format!("{MINIMAL}default: drop\n")),
        "valid values: passthrough, reject",
    );
    has(
        &errors(&format!("{MINIMAL}server: {{header_read_timeout: 0s}}\n")),
        "server.header_read_timeout: must be greater than 0",
    );
    has(
        &errors(&format!("{MINIMAL}routes: {{a: 1}}\n")),
        "routes: expected a list, found a map",
    );
    has(
        &errors(&format!("{MINIMAL}upstream:\n  url: http://y\n")),
        "upstream: repeated field (first set at line 1)",
    );
    // An unused Redis section is not checked against the Redis client.
    ok(&format!("{MINIMAL}store:\n  redis:\n    url: bogus\n"));
}

#[test]
fn postgres_section_is_validated() {
    let pg = |body: &str| format!("{MINIMAL}store:\n  backend: postgres\n  postgres:\n{body}");
    has(
        &errors(&pg("    url: postgres://h/db?sslmode=sometimes\n")),
        "store.postgres.url: invalid sslmode \"sometimes\"",
    );
    has(
        &errors(&pg("    table: \"records; drop table x\"\n")),
        "store.postgres.table: invalid table name",
    );
    has(
        &errors(&pg("    pool_size: 0\n")),
        "store.postgres.pool_size: must be greater than 0",
    );
    has(&errors(&pg("    port: 5432\n")), "store.postgres");
    let c = ok(&pg(
        "    url: postgres://idem:pw@10.0.0.1:5432,10.0.0.2:5432/idem?target_session_attrs=read-write&sslmode=verify-full\n    table: idem_intents\n    pool_size: 4\n    op_timeout: 1s\n",
    ));
    let crate::config::StoreBackend::Postgres(p) = &c.store.backend else {
        panic!("postgres: {:?}", c.store.backend)
    };
    assert_eq!((p.table.as_str(), p.pool_size), ("idem_intents", 4));
    assert_eq!(p.op_timeout, std::time::Duration::from_secs(1));
    // The readiness probe waits for PostgreSQL's own bound, not another backend's.
    let ready = crate::app::readiness_timeout(&c.store);
    assert_eq!(ready, std::time::Duration::from_secs(1));
    let memory = ok(MINIMAL);
    let ready = crate::app::readiness_timeout(&memory.store);
    assert_eq!(ready, std::time::Duration::from_millis(250));
}

#[test]
fn unknown_outcome_settings_are_checked() {
    let route = |fields: &str| {
        format!("{MINIMAL}routes:\n  - name: charge\n    path: /c/{{id}}\n    key: \"c:{{path.id}}\"\n    lease: 30s\n{fields}")
    };
    has(
        &errors(&route("    upstream_key_window: 30s\n")),
        "routes[0].upstream_key_window: upstream_key_window (30s) must be longer than the lease (30s)",
    );
    has(
        &errors(&route("    on_unknown: reconcile\n")),
        "routes[0].on_unknown: on_unknown: reconcile in route \"charge\" needs a reconcile: request",
    );
    has(
        &errors(&route("    on_unknown: guess\n")),
        "valid values: retry, reconcile, hold",
    );
    has(
        &errors(&route(
            "    on_unknown: reconcile\n    reconcile: {path: /v1/charges}\n",
        )),
        "has no {key}",
    );
    has(
        &errors(&route(
            "    reconcile: {path: \"/s?k={key}\", found: [200], absent: [200]}\n",
        )),
        "status 200 is in both found and absent",
    );
    let c = ok(&route(
        "    on_unknown: reconcile\n    upstream_key_window: 24h\n    reconcile: {method: POST, path: \"/v1/search?k={key}&i={path.id}\", absent: [404, 410], timeout: 3s}\n",
    ));
    let r = &c.routes[0];
    assert_eq!(r.on_unknown, OnUnknown::Reconcile);
    assert_eq!(
        r.upstream_key_window,
        Some(std::time::Duration::from_secs(86_400))
    );
    let lookup = r.reconcile.as_deref().unwrap();
    assert_eq!(
        (lookup.method.as_str(), lookup.found.as_slice()),
        ("POST", &[200][..])
    );
    assert_eq!(lookup.absent, [404, 410]);
    assert_eq!(lookup.timeout, std::time::Duration::from_secs(3));
    assert_eq!(lookup.found_json, None);
    // A search: an empty 200 is absent, a 200 with the attempt found.
    let search = ok(&route(
        "    on_unknown: reconcile\n    reconcile: {path: \"/s?k={key}\", found: [200], found_json: /data/0, absent: [200, 404]}\n",
    ));
    let lookup = search.routes[0].reconcile.as_deref().unwrap();
    assert_eq!(lookup.found_json.as_deref(), Some("/data/0"));
    assert_eq!(lookup.absent, [200, 404]);
    assert!(other_warnings(&search).is_empty(), "{:?}", search.warnings);
    has(
        &errors(&route(
            "    reconcile: {path: \"/s?k={key}\", found_json: data}\n",
        )),
        "invalid JSON pointer \"data\"",
    );
    // A query string with only a status rule: `idem check` warns.
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("routes[0].reconcile") && w.contains("add found_json")),
        "{:?}",
        c.warnings
    );
    let by_id = ok(&route("    reconcile: {path: \"/c/{key}\"}\n"));
    assert!(other_warnings(&by_id).is_empty(), "{:?}", by_id.warnings);
    // Defaults: hold without a window (nothing says a second send is safe), no lookup;
    // retry once the route declares the provider's window.
    let d = &ok(&route("")).routes[0];
    assert_eq!(
        (d.on_unknown, d.upstream_key_window),
        (OnUnknown::Hold, None)
    );
    let w = &ok(&route("    upstream_key_window: 24h\n")).routes[0];
    assert_eq!(w.on_unknown, OnUnknown::Retry);
    // retry without a window is refused, naming what to declare.
    has(
        &errors(&route("    on_unknown: retry\n")),
        "on_unknown: retry in route \"charge\" needs upstream_key_window",
    );
    let both = ok(&route(
        "    on_unknown: retry\n    upstream_key_window: 24h\n",
    ));
    assert_eq!(both.routes[0].on_unknown, OnUnknown::Retry);
}

#[test]
fn store_headers_are_read() {
    let c = ok(&format!(
        "{MINIMAL}routes:\n  - name: charge\n    path: /c/{{id}}\n    key: \"c:{{path.id}}\"\n    store_headers: {{exclude: [X-Session-Token], include: [location, x-session-token]}}\n"
    ));
    let h = &c.routes[0].store_headers;
    assert_eq!(h.exclude, ["x-session-token"]);
    assert_eq!(
        h.include.as_deref(),
        Some(
            &[
                http::header::LOCATION,
                http::HeaderName::from_static("x-session-token")
            ][..]
        )
    );
    has(&errors(&format!("{MINIMAL}routes:\n  - name: charge\n    path: /c\n    key: k\n    store_headers: [a]\n")), "expected a map");
    has(&errors(&format!("{MINIMAL}routes:\n  - name: charge\n    path: /c\n    key: k\n    store_headers: {{exclud: [a]}}\n")), "did you mean \"exclude\"");
}

#[test]
fn a_body_limit_over_the_buffer_budget_warns() {
    let c = ok(&format!(
        "{MINIMAL}server:\n  max_buffered_bytes: 1MiB\ndefault: reject\nroutes:\n  - {{name: big, path: /b, key: \"{{method}}\", max_request_bytes: 2MiB}}\n  - {{name: small, path: /s, key: \"{{method}}\"}}\n"
    ));
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].contains("routes[0].max_request_bytes")
            && c.warnings[0].contains("always 503"),
        "{:?}",
        c.warnings
    );
    let c = ok(&format!(
        "{MINIMAL}server:\n  body_read_timeout: 5s\n  http2: false\n  http2_max_streams: 10\n"
    ));
    assert_eq!(
        c.server.body_read_timeout(&c.upstream),
        std::time::Duration::from_secs(5)
    );
    assert!(!c.server.http2);
    assert_eq!(c.server.http2_max_streams, 10);
    let c = ok(
        &format!("{MINIMAL}upstream:\n  url: http://127.0.0.1:3000\n  timeout: 3s\n")
            .replacen(MINIMAL, "", 1),
    );
    assert_eq!(
        c.server.body_read_timeout(&c.upstream),
        std::time::Duration::from_secs(3)
    );
    assert_eq!(c.server.max_buffered_bytes, 64 << 20);
}

#[test]
fn memory_store_max_bytes() {
    let c = ok(&format!(
        "{MINIMAL}store:\n  memory:\n    max_bytes: 40MiB\n"
    ));
    assert_eq!(c.store.memory_max_bytes, 40 << 20);
    let c = ok(MINIMAL);
    assert_eq!(
        c.store.memory_max_bytes,
        crate::store::MEMORY_STORE_MAX_BYTES
    );
    let e = errors(&format!("{MINIMAL}store:\n  memory:\n    max_bytes: 0\n"));
    assert!(e[0].contains("store.memory.max_bytes"), "{e:?}");
}

/// `accept_unsealed_until` a day or more ahead switches issue 46 §1 off until then: a
/// warning at its line. Near (the rollout's end) or past: none.
#[test]
fn accept_unsealed_until_far_ahead_is_warned() {
    let at = |ahead: std::time::Duration| {
        let when = std::time::SystemTime::now() + ahead;
        format!(
            "{MINIMAL}store:\n  encryption:\n    keys: [{{id: k1, file: /k1}}]\n    accept_unsealed_until: {}\n",
            humantime::format_rfc3339_seconds(when)
        )
    };
    let hour = std::time::Duration::from_secs(3600);
    let ahead = |c: &Config| {
        c.warnings
            .iter()
            .filter(|w| w.contains("accept_unsealed_until"))
            .cloned()
            .collect::<Vec<_>>()
    };
    let w = ahead(&ok(&at(hour * 24 * 400)));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("t.yaml:6:28: store.encryption.accept_unsealed_until: dated a day"),
        "{w:?}"
    );
    assert!(ahead(&ok(&at(hour * 2))).is_empty());
    let past = ok(&format!(
        "{MINIMAL}store:\n  encryption:\n    keys: [{{id: k1, file: /k1}}]\n    accept_unsealed_until: 2026-01-01T00:00:00Z\n"
    ));
    assert!(ahead(&past).is_empty(), "{:?}", past.warnings);
}

/// `default: passthrough` beside protected routes is a warning (issue 46 §6), unless
/// catch-all routes take every unsafe method (the chart's default): then only GET,
/// HEAD, OPTIONS and the like pass through.
#[test]
fn passthrough_beside_catch_alls_for_every_unsafe_method_is_not_warned() {
    let passthrough = |routes: &str| {
        let c = ok(&format!("{MINIMAL}default: passthrough\nroutes:\n{routes}"));
        c.warnings
            .iter()
            .any(|w| w.contains("passthrough beside protected routes"))
    };
    let all = "  - name: all\n    path: /{p*}\n    key: \"{header.idempotency-key}\"\n";
    assert!(
        !passthrough(all),
        "the default methods are the four unsafe ones"
    );
    let split = "  - name: post\n    methods: [POST]\n    path: /{p*}\n    key: k\n  - name: rest\n    methods: [PUT, PATCH, DELETE]\n    path: /{p*}\n    key: k\n";
    assert!(!passthrough(split));
    let no_delete = "  - name: all\n    methods: [POST, PUT, PATCH]\n    path: /{p*}\n    key: k\n";
    assert!(passthrough(no_delete), "DELETE passes through");
    let one_path = "  - name: charge\n    path: /invoices/{id}/charge\n    key: k\n";
    assert!(passthrough(one_path), "other paths pass through");
}
