//! `mcp:` routes: their defaults and what their keys may not use.

use super::*;

fn mcp_route(extra: &str) -> String {
    format!("{MINIMAL}routes:\n  - name: tools\n    path: /mcp\n    mcp:\n      tools: [charge_customer, send_email]\n{extra}")
}

#[test]
fn an_mcp_route_defaults_its_key_and_methods() {
    let config = ok(&mcp_route(""));
    let route = &config.routes[0];
    let mcp = route.mcp.as_ref().expect("an mcp route");
    assert_eq!(mcp.tools, ["charge_customer", "send_email"]);
    assert!(mcp.describe);
    assert_eq!(route.key[0].as_str(), "{mcp.tool}:{mcp.args_hash}");
    assert_eq!(route.methods, [Method::POST, Method::GET, Method::DELETE]);
    let config = ok(&mcp_route(
        "    key: \"charge:{body.params.arguments.invoice}\"\n",
    ));
    assert_eq!(
        config.routes[0].key[0].as_str(),
        "charge:{body.params.arguments.invoice}"
    );
    let config = ok(&format!(
        "{MINIMAL}routes:\n  - name: t\n    path: /mcp\n    mcp: {{tools: [a], describe: false}}\n"
    ));
    assert!(!config.routes[0].mcp.as_ref().unwrap().describe);
}

#[test]
fn keys_that_change_with_every_repeat_are_refused() {
    for (key, needle) in [
        ("{body.id}", "changes with every repeat"),
        (
            "{body.params._meta.progressToken}",
            "changes with every repeat",
        ),
        ("{body_hash}", "covers the JSON-RPC id"),
        ("{header.mcp-session-id}", "new session"),
    ] {
        let e = errors(&mcp_route(&format!("    key: \"{key}\"\n")));
        has(&e, needle);
    }
    let e = errors(&mcp_route("    fingerprint: {body: [id]}\n"));
    has(&e, "list fields under params.arguments");
}

#[test]
fn mcp_placeholders_need_an_mcp_route_and_tools() {
    let e = errors(&route("    key: \"{mcp.tool}\"\n"));
    has(&e, "need an `mcp:` section");
    let e = errors(&format!(
        "{MINIMAL}routes:\n  - name: t\n    path: /mcp\n    mcp: {{describe: true}}\n"
    ));
    has(&e, "routes[0].mcp.tools: missing");
    let e = errors(&format!(
        "{MINIMAL}routes:\n  - name: t\n    path: /mcp\n    mcp: {{tools: []}}\n"
    ));
    has(&e, "list at least one tool");
}

#[test]
fn an_mcp_route_cannot_reconcile() {
    let e = errors(&mcp_route(
        "    on_unknown: reconcile\n    reconcile: {path: \"/s?k={key}\"}\n",
    ));
    has(&e, "on MCP routes an unknown outcome is retried or held");
    let c = ok(&mcp_route("    on_unknown: hold\n"));
    assert_eq!(c.routes[0].on_unknown, OnUnknown::Hold);
}
