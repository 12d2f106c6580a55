//! Checks that need more than one field: a route's templates against its path, its
//! lease against its retention, and routes against each other (vector's `check_*`).
//!
//! Each check pushes into the walker and never stops the others. Errors are what would
//! make idem misbehave; warnings are settings that do nothing or look like mistakes.

use std::time::Duration;

use super::policy_fields::{PolicyFields, ReadRoute};
use super::walk::{At, Walker};
use super::{defaults, OnConcurrent, OnUnknown};
use crate::path::PathTemplate;
use crate::template::{Part, Template};
use crate::units::format_duration;

/// Per-route checks on the merged settings (route, then `defaults:`).
pub(crate) fn route(w: &mut Walker<'_>, name: &str, path: &PathTemplate, fields: &PolicyFields) {
    if let Some(key) = &fields.key {
        for alt in &key.value {
            check_key_alternative(w, alt);
            check_path_names(w, alt, path);
        }
    }
    if let Some(scope) = &fields.scope {
        check_path_names(w, scope, path);
    }
    check_lease(w, name, fields);
    check_unknown(w, name, fields);
    check_wait_timeout(w, fields);
}

fn check_key_alternative(w: &mut Walker<'_>, alt: &At<Template>) {
    if alt.value.is_empty() {
        w.error(
            alt.pos,
            &alt.path,
            "an empty key alternative would give every request the same key",
        );
    } else if alt
        .value
        .parts()
        .iter()
        .all(|p| matches!(p, Part::Literal(_)))
    {
        let message = format!(
            "{:?} has no placeholder: every request to this route shares one key, so only the \
             first ever runs",
            alt.value.as_str()
        );
        w.warn(alt.pos, &alt.path, message);
    }
}

/// `{path.NAME}` must name a capture of the route's own path template.
fn check_path_names(w: &mut Walker<'_>, template: &At<Template>, path: &PathTemplate) {
    let captures: Vec<&str> = path.capture_names().collect();
    for name in template.value.path_names() {
        if !captures.contains(&name) {
            let has = if captures.is_empty() {
                "it has no captures".to_string()
            } else {
                format!("its captures: {}", captures.join(", "))
            };
            let message = format!(
                "placeholder {{path.{name}}} names no capture of the route's path {:?}; {has}",
                path.as_str()
            );
            w.error(template.pos, &template.path, message);
        }
    }
}

/// The reservation (lease) must expire before the stored outcome (retention) does:
/// otherwise a repeat that arrives after the record is gone runs the side effect again
/// while the first call could still be in flight.
fn check_lease(w: &mut Walker<'_>, route: &str, fields: &PolicyFields) {
    let lease = fields.lease.as_ref().map_or(defaults::LEASE, |a| a.value);
    let retention = fields
        .retention
        .as_ref()
        .map_or(defaults::RETENTION, |a| a.value);
    if lease >= retention {
        // Point at whichever of the two this route sets itself (or the one that is set).
        let (at, other) = match (&fields.lease, &fields.retention) {
            (Some(l), Some(r)) if !is_route_local(l) && is_route_local(r) => (r, l.path.as_str()),
            (Some(l), r) => (
                l,
                r.as_ref()
                    .map_or("the built-in default", |r| r.path.as_str()),
            ),
            (None, Some(r)) => (r, "the built-in default"),
            (None, None) => return,
        };
        // Both from `defaults:`: one message for all routes (they are deduplicated).
        let in_route = match is_route_local(at) || other.starts_with("routes[") {
            true => format!(" in route {route:?}"),
            false => String::new(),
        };
        let message = format!(
            "lease ({}) must be shorter than retention ({}){in_route}; the other value is from \
             {other}: a record must outlive its reservation, or a repeat after it expires runs \
             the side effect again",
            format_duration(lease),
            format_duration(retention),
        );
        w.error(at.pos, &at.path, message);
    }
    if let Some(l) = fields
        .lease
        .as_ref()
        .filter(|l| l.value < Duration::from_secs(1))
    {
        let message = format!(
            "lease {} is under 1s: renewals every lease/3 leave little slack for a slow store, \
             and a missed renewal lets a duplicate run",
            format_duration(l.value)
        );
        w.warn(l.pos, &l.path, message);
    }
}

/// SPEC §1 "Unknown outcomes": the reservation must expire well before the provider
/// forgets the key, and `reconcile` needs its lookup.
fn check_unknown(w: &mut Walker<'_>, route: &str, fields: &PolicyFields) {
    let lease = fields.lease.as_ref().map_or(defaults::LEASE, |a| a.value);
    if let Some(window) = fields
        .upstream_key_window
        .as_ref()
        .filter(|a| a.value <= lease)
    {
        let message = format!(
            "upstream_key_window ({}) must be longer than the lease ({}) in route {route:?}: \
             an attempt's lease must end well before the upstream forgets its key, or a retry \
             after the lease could run the side effect again",
            format_duration(window.value),
            format_duration(lease),
        );
        w.error(window.pos, &window.path, message);
    }
    let on_unknown = fields.on_unknown.as_ref();
    if let Some(at) = on_unknown.filter(|a| a.value == OnUnknown::Retry) {
        if fields.upstream_key_window.is_none() {
            let message = format!(
                "on_unknown: retry in route {route:?} needs upstream_key_window: how long the \
                 upstream deduplicates the forwarded key (Stripe: 24h). Without it nothing says \
                 a second send is safe; declare the window, or use hold (the default) or reconcile"
            );
            w.error(at.pos, &at.path, message);
        }
    }
    if on_unknown.is_some_and(|a| a.value == OnUnknown::Reconcile) && fields.reconcile.is_none() {
        let at = on_unknown.expect("checked above");
        let message = format!(
            "on_unknown: reconcile in route {route:?} needs a reconcile: request, e.g. \
             reconcile: {{path: \"/v1/charges/search?idempotency_key={{key}}\", found: [200], absent: [404]}}"
        );
        w.error(at.pos, &at.path, message);
    }
}

/// A route's own `wait_timeout` does nothing unless the route waits.
fn check_wait_timeout(w: &mut Walker<'_>, fields: &PolicyFields) {
    let Some(wait) = fields.wait_timeout.as_ref().filter(|a| is_route_local(a)) else {
        return;
    };
    let on_concurrent = fields
        .on_concurrent
        .as_ref()
        .map_or(OnConcurrent::Conflict, |a| a.value);
    if on_concurrent == OnConcurrent::Conflict {
        w.warn(
            wait.pos,
            &wait.path,
            "ignored: on_concurrent is conflict, so duplicates get 409 at once; set \
             on_concurrent: wait or drop wait_timeout",
        );
    }
}

fn is_route_local<T>(at: &At<T>) -> bool {
    at.path.starts_with("routes[")
}

/// Route names identify records, metrics and admin URLs, so each must be unique.
pub(crate) fn unique_names(w: &mut Walker<'_>, names: &[At<String>]) {
    for (i, name) in names.iter().enumerate() {
        if let Some(first) = names[..i].iter().find(|n| n.value == name.value) {
            let message = format!(
                "duplicate route name {:?} (first used at line {}); names identify records, \
                 metrics and admin URLs, so each must be unique",
                name.value, first.pos.line
            );
            w.error(name.pos, &name.path, message);
        }
    }
}

/// A route an earlier one hides completely (same path, no method of its own) never runs.
pub(crate) fn shadowed_routes(w: &mut Walker<'_>, routes: &[ReadRoute]) {
    for (i, route) in routes.iter().enumerate() {
        let hidden_by = routes[..i].iter().find(|r| {
            r.path.value.as_str() == route.path.value.as_str()
                && route
                    .policy
                    .methods
                    .iter()
                    .all(|m| r.policy.methods.contains(m))
        });
        if let Some(first) = hidden_by {
            let message = format!(
                "never matches: route {:?} (line {}) has the same path and methods, and the \
                 first match wins",
                first.name.value, first.name.pos.line
            );
            w.warn(route.path.pos, &route.path.path, message);
        }
    }
}
