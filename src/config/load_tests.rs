//! Whole-document tests: defaults, inheritance, and every validation rule with the
//! place it reports. Variables are injected through `from_yaml_str_with_env`.

use std::time::Duration;

use http::Method;

use super::*;

const MINIMAL: &str = "upstream:\n  url: http://127.0.0.1:3000\n";

fn env(name: &str) -> Option<String> {
    match name {
        "REDIS_PASSWORD" => Some("hunter2".into()),
        "LEASE" => Some("45s".into()),
        _ => None,
    }
}

fn load(text: &str) -> Result<Config, ConfigErrors> {
    Config::from_yaml_str_with_env(text, Some(std::path::Path::new("t.yaml")), env)
}

fn ok(text: &str) -> Config {
    load(text).unwrap_or_else(|e| panic!("expected a valid config, got:\n{e}"))
}

/// The errors as `line:col path` plus message, for assertions.
fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e
            .errors()
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e.pos.map_or("-".into(), |p| p.to_string()),
                    e.path,
                    e.message
                )
            })
            .collect(),
    }
}

fn has(errors: &[String], needle: &str) {
    assert!(
        errors.iter().any(|e| e.contains(needle)),
        "no {needle:?} in {errors:#?}"
    );
}

fn route(text: &str) -> String {
    format!("{MINIMAL}routes:\n  - name: r\n    path: /items/{{id}}\n{text}")
}

#[test]
fn minimal_file_gets_every_default() {
    let c = ok(MINIMAL);
    assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(c.admin.listen.to_string(), "127.0.0.1:9901");
    assert_eq!(c.admin.token, None);
    assert_eq!(c.server.max_header_bytes, 64 * 1024);
    assert_eq!(c.server.shutdown_grace, Duration::from_secs(25));
    assert_eq!(c.upstream.timeout, Duration::from_secs(30));
    assert_eq!(c.store.backend, Backend::Memory);
    assert_eq!(c.store.redis.op_timeout, Duration::from_millis(250));
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
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
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
    assert_eq!(c.store.redis.url, "redis://:hunter2@10.0.0.1:6379/0");
    assert_eq!(c.admin.token, None, "an empty token is no token");
    assert!(c.warnings.iter().all(|w| !w.contains("hunter2")));
    let e = errors(&format!("{MINIMAL}admin:\n  token: ${{IDEM_TOKEN}}\n"));
    assert_eq!(e, ["4:10 admin.token: environment variable IDEM_TOKEN is not set; set it, or give a default with ${IDEM_TOKEN:-default}"]);
}

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
    let e = errors(&format!(
        "listen: nope\nupstream:\n  url: ftp://x\n  timeot: 3s\nserver:\n  max_header_bytes: 64Kb2\n\
         routes:\n  - name: a\n    path: /a/{{id}}\n    key: \"x:{{path.idd}}\"\n    lease: 30\n  - name: a\n    path: /b\n  - path: /c\n    key: \"k{{\"\n"
    ));
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
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn defaults_wait_timeout_warns_only_when_nobody_waits() {
    let text = |oc: &str| {
        format!("{MINIMAL}defaults:\n  wait_timeout: 5s\nroutes:\n  - {{name: a, path: /a, key: \"{{method}}\", on_concurrent: {oc}}}\n")
    };
    assert!(ok(&text("wait")).warnings.is_empty());
    assert!(ok(&text("conflict")).warnings[0].contains("defaults.wait_timeout: ignored"));
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
fn for_upstream_is_the_no_config_setup() {
    let c = Config::for_upstream("http://127.0.0.1:3000").unwrap();
    assert_eq!(c.upstream.url.to_string(), "http://127.0.0.1:3000/");
    assert_eq!(c.store.backend, Backend::Memory);
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
        table.contains("1 route, 1 warning\nwarning: t.yaml:"),
        "{table}"
    );
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
