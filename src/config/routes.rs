//! `defaults:` and `routes:` → [`RoutePolicy`] per route.
//!
//! A route is its own fields, then `defaults:`, then the built-in defaults. Problems in a
//! route never stop the walk: the next route is still read, so every route's errors come
//! out together. A route is only built when its name, path and key are all valid.

use std::sync::Arc;

use super::policy_fields::{PolicyFields, ReadRoute};
use super::validate;
use super::values;
use super::walk::{At, Walker};
use super::yaml::Node;
use super::{mcp, BodyFingerprint, OnConcurrent, OnUnknown, RoutePolicy};
use crate::template::Template;
use http::Method;

/// Read `defaults:` and every route; invalid routes are reported and left out.
pub(crate) fn read(
    w: &mut Walker<'_>,
    defaults: Option<&Node>,
    routes: Option<&Node>,
) -> Vec<Arc<RoutePolicy>> {
    let defaults = match defaults {
        Some(node) => {
            let f = w.fields(node, "defaults");
            PolicyFields::read(w, &f)
        }
        None => PolicyFields::default(),
    };
    let mut read = Vec::new();
    // Every valid name, also of routes that fail otherwise, so duplicates are all found.
    let mut names = Vec::new();
    if let Some(node) = routes {
        for (path, item) in w.list(node, "routes") {
            if let Some(route) = read_route(w, item, &path, &defaults, &mut names) {
                read.push(route);
            }
        }
    }
    check_default_wait_timeout(w, &defaults, &read);
    validate::unique_names(w, &names);
    validate::shadowed_routes(w, &read);
    read.into_iter().map(|r| Arc::new(r.policy)).collect()
}

fn read_route(
    w: &mut Walker<'_>,
    node: &Node,
    path: &str,
    defaults: &PolicyFields,
    names: &mut Vec<At<String>>,
) -> Option<ReadRoute> {
    let f = w.fields(node, path);
    let name = w.field(&f, "name", values::route_name);
    names.extend(name.clone());
    if f.get("name").is_none() {
        w.error(
            node.pos,
            &f.path("name"),
            "missing: every route needs a name, e.g. name: charge_invoice",
        );
    }
    let mut route_path = w.field(&f, "path", values::path_template);
    // `path_case: insensitive`: the route's literals match in any ASCII case.
    let insensitive = w.field(&f, "path_case", |text| match text.trim() {
        "sensitive" => Ok(false),
        "insensitive" => Ok(true),
        other => Err(format!(
            "invalid path_case {other:?}; expected sensitive (the default: RFC 3986 paths are) or insensitive"
        )),
    });
    if let (Some(path), Some(true)) = (&mut route_path, insensitive.map(|a| a.value)) {
        path.value = path.value.clone().case_insensitive();
    }
    if f.get("path").is_none() {
        w.error(
            node.pos,
            &f.path("path"),
            "missing: every route needs a path, e.g. path: /invoices/{invoice_id}/charge",
        );
    }
    let mcp = f.get("mcp").map(|node| mcp::read(w, node, &f.path("mcp")));
    let mut own = PolicyFields::read(w, &f);
    if mcp.is_some() {
        mcp_defaults(&mut own, &f.path("key"), node.pos);
    }
    let fields = own.or(defaults);
    match &fields.key {
        None if f.get("key").is_none() => w.error(
            node.pos,
            &f.path("key"),
            "missing: a route needs at least one key alternative, e.g. key: \"charge:{path.invoice_id}\" \
             (or key: \"{header.idempotency-key}\" to use the caller's header)",
        ),
        Some(key) if key.value.is_empty() => {
            w.error(key.pos, &key.path, "list at least one key alternative");
        }
        _ => {}
    }
    let (name, route_path) = (name?, route_path?);
    let key = fields.key.as_ref().filter(|k| !k.value.is_empty())?;
    validate::route(w, &name.value, &route_path.value, &fields);
    check_mcp_templates(w, &fields, mcp.is_some());
    let alternatives = key.value.iter().map(|alt| alt.value.clone()).collect();
    let mut policy =
        RoutePolicy::with_defaults(&name.value, route_path.value.clone(), alternatives);
    fields.apply(&mut policy);
    policy.mcp = match mcp {
        Some(read) => Some(Arc::new(read?.value)),
        None => None,
    };
    Some(ReadRoute {
        name,
        path: route_path,
        policy,
    })
}

/// An MCP route that sets no `key` or `methods` of its own gets the tool and its
/// arguments as key (`defaults.key` is meant for plain HTTP routes), and POST, GET and
/// DELETE: every message of a streamable HTTP endpoint reaches the MCP handler.
fn mcp_defaults(own: &mut PolicyFields, key_path: &str, pos: super::Pos) {
    fn at<T>(value: T, path: &str, pos: super::Pos) -> At<T> {
        At {
            value,
            pos,
            path: path.to_owned(),
        }
    }
    if own.key.is_none() {
        // The built-in template always parses; a failure would be a parser bug.
        if let Ok(key) = Template::parse(mcp::MCP_KEY) {
            own.key = Some(at(vec![at(key, key_path, pos)], key_path, pos));
        }
    }
    if own.methods.is_none() {
        let methods = vec![Method::POST, Method::GET, Method::DELETE];
        own.methods = Some(at(methods, key_path, pos));
    }
}

/// Key, scope and fingerprint fields against the route's kind (MCP or not).
fn check_mcp_templates(w: &mut Walker<'_>, fields: &PolicyFields, is_mcp: bool) {
    for alt in fields.key.iter().flat_map(|k| &k.value) {
        mcp::check_template(w, alt, is_mcp);
    }
    if let Some(scope) = &fields.scope {
        mcp::check_template(w, scope, is_mcp);
    }
    // A lookup answers in the upstream's REST terms, not as the call's JSON-RPC result.
    let reconciles = fields.on_unknown.as_ref();
    if let (true, Some(at)) = (
        is_mcp,
        reconciles.filter(|a| a.value == OnUnknown::Reconcile),
    ) {
        let message = "on MCP routes an unknown outcome is retried or held (on_unknown: retry \
                       or hold): a reconciliation lookup cannot answer as the tool's result";
        w.error(at.pos, &at.path, message);
    }
    if let (true, Some(fp)) = (is_mcp, &fields.fingerprint) {
        if let BodyFingerprint::Fields(paths) = &fp.value.body {
            if let Some(bad) = paths.iter().find(|p| !mcp::stable_body_path(p.segments())) {
                let message = format!(
                    "{bad} changes with every repeat of an MCP call; list fields under params.arguments"
                );
                w.error(fp.pos, &fp.path, message);
            }
        }
    }
}

/// `defaults.wait_timeout` is only pointless when no route waits at all; a route that
/// sets `wait_timeout` itself is checked in [`validate::route`].
fn check_default_wait_timeout(w: &mut Walker<'_>, defaults: &PolicyFields, routes: &[ReadRoute]) {
    let Some(wait) = &defaults.wait_timeout else {
        return;
    };
    let anyone_waits = routes
        .iter()
        .any(|r| r.policy.on_concurrent == OnConcurrent::Wait);
    let defaults_wait = defaults
        .on_concurrent
        .as_ref()
        .is_some_and(|c| c.value == OnConcurrent::Wait);
    if !anyone_waits && !defaults_wait {
        w.warn(
            wait.pos,
            &wait.path,
            "ignored: no route has on_concurrent: wait, so duplicates get 409 at once; \
             set on_concurrent: wait or drop wait_timeout",
        );
    }
}
