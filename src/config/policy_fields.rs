//! Route settings as written: once for `defaults:`, once per route.
//!
//! [`PolicyFields`] keeps every field as `Option<At<_>>`: unset fields fall through to
//! `defaults:` ([`PolicyFields::or`]) and then to the built-in default
//! ([`PolicyFields::apply`] over [`RoutePolicy::with_defaults`]). Each value remembers
//! where it was written, so a check on the merged route (e.g. `lease` < `retention`)
//! points at the line that set the offending value, whether a route or `defaults:`.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};

use super::breaker;
use super::reconcile;
use super::sections::nonzero;
use super::values::{self, FingerprintPart, StatusEntry};
use super::walk::{At, Fields, Walker};
use super::yaml::{Node, Value};
use super::{BodyFingerprint, FingerprintSpec, KeyFormat, OnAmbiguous, OnConcurrent, OnFailure};
use super::{BreakerPolicy, OnUnknown, Reconcile, RoutePolicy, StatusSet, StoreHeaders};
use crate::path::PathTemplate;
use crate::template::Template;

/// A route as read, before it becomes a [`RoutePolicy`]; kept for cross-route checks
/// (`validate.rs`). Here, below both the reader (`routes.rs`) and the checks, so
/// neither imports the other's types.
pub(crate) struct ReadRoute {
    pub name: At<String>,
    pub path: At<PathTemplate>,
    pub policy: RoutePolicy,
}

/// Route settings as written; `None` = not set here.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyFields {
    pub methods: Option<At<Vec<Method>>>,
    pub key: Option<At<Vec<At<Template>>>>,
    pub require_key: Option<At<bool>>,
    pub max_key_length: Option<At<usize>>,
    pub scope: Option<At<Template>>,
    pub fingerprint: Option<At<FingerprintSpec>>,
    pub store_statuses: Option<At<StatusSet>>,
    pub lease: Option<At<Duration>>,
    pub retention: Option<At<Duration>>,
    pub on_concurrent: Option<At<OnConcurrent>>,
    pub wait_timeout: Option<At<Duration>>,
    pub on_failure: Option<At<OnFailure>>,
    pub on_ambiguous: Option<At<OnAmbiguous>>,
    pub on_unknown: Option<At<OnUnknown>>,
    pub upstream_key_window: Option<At<Duration>>,
    pub reconcile: Option<At<Arc<Reconcile>>>,
    pub breaker: Option<At<BreakerPolicy>>,
    pub store_headers: Option<At<StoreHeaders>>,
    pub max_request_bytes: Option<At<usize>>,
    pub max_response_bytes: Option<At<usize>>,
    pub forward_key_header: Option<At<HeaderName>>,
    pub forward_key_format: Option<At<KeyFormat>>,
    pub bind_credentials: Option<At<Vec<HeaderName>>>,
}

/// A list field (or, if `single_allowed`, one bare value) whose items `parse` reads.
/// `None` when absent or when any item is invalid (each reported).
fn read_list<T>(
    w: &mut Walker<'_>,
    f: &Fields<'_>,
    name: &'static str,
    single_allowed: bool,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<At<Vec<At<T>>>> {
    let node = f.get(name)?;
    let path = f.path(name);
    let items: Vec<(String, &Node)> = match &node.value {
        Value::Scalar(_) if single_allowed => vec![(path.clone(), node)],
        _ => w.list(node, &path),
    };
    let errors_before = w.errors.len();
    let mut parsed = Vec::with_capacity(items.len());
    for (item_path, item) in &items {
        if item.value == Value::Null {
            w.error(item.pos, item_path, "empty list item");
        } else if let Some(value) = w.parsed(item, item_path, &parse) {
            parsed.push(value);
        }
    }
    (w.errors.len() == errors_before).then_some(At {
        value: parsed,
        pos: node.pos,
        path,
    })
}

fn values<T>(list: Option<At<Vec<At<T>>>>) -> Option<At<Vec<T>>> {
    list.map(|at| at.map(|items| items.into_iter().map(|i| i.value).collect()))
}

impl PolicyFields {
    /// Read the policy fields of an already opened map (`defaults:` or a route).
    pub fn read(w: &mut Walker<'_>, f: &Fields<'_>) -> PolicyFields {
        let methods = values(read_list(w, f, "methods", true, values::method));
        if let Some(m) = methods.as_ref().filter(|m| m.value.is_empty()) {
            w.error(m.pos, &m.path, "list at least one method, e.g. [POST]");
        }
        let max_key_length = w.count(f, "max_key_length");
        let lease = w.duration(f, "lease");
        let retention = w.duration(f, "retention");
        let max_request_bytes = w.size(f, "max_request_bytes");
        let upstream_key_window = w.duration(f, "upstream_key_window");
        let scope = w.field(f, "scope", |s| match s {
            "" => Ok(Template::empty()),
            s => values::template(s),
        });
        PolicyFields {
            methods: methods.filter(|m| !m.value.is_empty()),
            key: read_list(w, f, "key", true, values::template),
            require_key: w.flag(f, "require_key"),
            max_key_length: nonzero_at(w, max_key_length),
            scope,
            fingerprint: fingerprint(w, f),
            store_statuses: store_statuses(w, f),
            lease: nonzero_at(w, lease),
            retention: nonzero_at(w, retention),
            on_concurrent: w.choice(f, "on_concurrent"),
            wait_timeout: w.duration(f, "wait_timeout"),
            on_failure: w.choice(f, "on_failure"),
            on_ambiguous: w.choice(f, "on_ambiguous"),
            on_unknown: w.choice(f, "on_unknown"),
            upstream_key_window: nonzero_at(w, upstream_key_window),
            reconcile: f.get("reconcile").and_then(|node| {
                let read = reconcile::read(w, node, &f.path("reconcile"))?;
                Some(read.map(Arc::new))
            }),
            breaker: f
                .get("breaker")
                .and_then(|node| breaker::read(w, node, &f.path("breaker"))),
            store_headers: store_headers(w, f),
            max_request_bytes: nonzero_at(w, max_request_bytes),
            max_response_bytes: w.size(f, "max_response_bytes"),
            forward_key_header: w.field(f, "forward_key_header", values::forward_header),
            forward_key_format: w.choice(f, "forward_key_format"),
            bind_credentials: values(read_list(
                w,
                f,
                "bind_credentials",
                false,
                values::header_name,
            )),
        }
    }

    /// This route's settings, falling back to `defaults:` field by field.
    pub fn or(self, d: &PolicyFields) -> PolicyFields {
        PolicyFields {
            methods: self.methods.or_else(|| d.methods.clone()),
            key: self.key.or_else(|| d.key.clone()),
            require_key: self.require_key.or_else(|| d.require_key.clone()),
            max_key_length: self.max_key_length.or_else(|| d.max_key_length.clone()),
            scope: self.scope.or_else(|| d.scope.clone()),
            fingerprint: self.fingerprint.or_else(|| d.fingerprint.clone()),
            store_statuses: self.store_statuses.or_else(|| d.store_statuses.clone()),
            lease: self.lease.or_else(|| d.lease.clone()),
            retention: self.retention.or_else(|| d.retention.clone()),
            on_concurrent: self.on_concurrent.or_else(|| d.on_concurrent.clone()),
            wait_timeout: self.wait_timeout.or_else(|| d.wait_timeout.clone()),
            on_failure: self.on_failure.or_else(|| d.on_failure.clone()),
            on_ambiguous: self.on_ambiguous.or_else(|| d.on_ambiguous.clone()),
            on_unknown: self.on_unknown.or_else(|| d.on_unknown.clone()),
            upstream_key_window: self
                .upstream_key_window
                .or_else(|| d.upstream_key_window.clone()),
            reconcile: self.reconcile.or_else(|| d.reconcile.clone()),
            breaker: self.breaker.or_else(|| d.breaker.clone()),
            store_headers: self.store_headers.or_else(|| d.store_headers.clone()),
            max_request_bytes: self
                .max_request_bytes
                .or_else(|| d.max_request_bytes.clone()),
            max_response_bytes: self
                .max_response_bytes
                .or_else(|| d.max_response_bytes.clone()),
            forward_key_header: self
                .forward_key_header
                .or_else(|| d.forward_key_header.clone()),
            forward_key_format: self
                .forward_key_format
                .or_else(|| d.forward_key_format.clone()),
            bind_credentials: self.bind_credentials.or_else(|| d.bind_credentials.clone()),
        }
    }

    /// Overwrite `route`'s built-in defaults with every field set here.
    pub fn apply(&self, route: &mut RoutePolicy) {
        fn put<T: Clone>(target: &mut T, value: &Option<At<T>>) {
            if let Some(at) = value {
                *target = at.value.clone();
            }
        }
        put(&mut route.methods, &self.methods);
        if let Some(key) = &self.key {
            route.key = key.value.iter().map(|alt| alt.value.clone()).collect();
        }
        put(&mut route.require_key, &self.require_key);
        put(&mut route.max_key_length, &self.max_key_length);
        put(&mut route.scope, &self.scope);
        put(&mut route.fingerprint, &self.fingerprint);
        put(&mut route.store_statuses, &self.store_statuses);
        put(&mut route.lease, &self.lease);
        put(&mut route.retention, &self.retention);
        put(&mut route.on_concurrent, &self.on_concurrent);
        put(&mut route.wait_timeout, &self.wait_timeout);
        put(&mut route.on_failure, &self.on_failure);
        put(&mut route.on_ambiguous, &self.on_ambiguous);
        if let Some(window) = &self.upstream_key_window {
            route.upstream_key_window = Some(window.value);
        }
        route.on_unknown = match &self.on_unknown {
            Some(at) => at.value,
            None => OnUnknown::default_for(route.upstream_key_window),
        };
        if let Some(reconcile) = &self.reconcile {
            route.reconcile = Some(reconcile.value.clone());
        }
        if let Some(breaker) = &self.breaker {
            route.breaker = Some(breaker.value);
        }
        put(&mut route.store_headers, &self.store_headers);
        put(&mut route.max_request_bytes, &self.max_request_bytes);
        put(&mut route.max_response_bytes, &self.max_response_bytes);
        put(&mut route.forward_key_header, &self.forward_key_header);
        put(&mut route.forward_key_format, &self.forward_key_format);
        put(&mut route.bind_credentials, &self.bind_credentials);
    }
}

fn nonzero_at<T: PartialEq + Default + Clone>(
    w: &mut Walker<'_>,
    at: Option<At<T>>,
) -> Option<At<T>> {
    let keep = at.clone();
    nonzero(w, at).and(keep)
}

/// `[method, path, body]` (any subset), or `{body: [field, ...]}` (method and path too).
fn fingerprint(w: &mut Walker<'_>, f: &Fields<'_>) -> Option<At<FingerprintSpec>> {
    let node = f.get("fingerprint")?;
    let path = f.path("fingerprint");
    match &node.value {
        Value::Map(_) => {
            let map = w.fields(node, &path);
            if map.get("body").is_none() {
                w.error(node.pos, &path, "the map form is {body: [field, ...]}; or use a list such as [method, path, body]");
                return None;
            }
            let fields = read_list(w, &map, "body", false, values::field_path);
            let fields = values(fields)?;
            if fields.value.is_empty() {
                w.error(
                    fields.pos,
                    &fields.path,
                    "list at least one body field, e.g. [amount, currency]",
                );
                return None;
            }
            let spec = FingerprintSpec {
                method: true,
                path: true,
                body: BodyFingerprint::Fields(fields.value),
            };
            Some(At {
                value: spec,
                pos: node.pos,
                path,
            })
        }
        Value::Seq(_) => {
            let parts = values(read_list(
                w,
                f,
                "fingerprint",
                false,
                values::fingerprint_part,
            ))?;
            let has = |p| parts.value.contains(&p);
            let spec = FingerprintSpec {
                method: has(FingerprintPart::Method),
                path: has(FingerprintPart::Path),
                body: if has(FingerprintPart::Body) {
                    BodyFingerprint::Whole
                } else {
                    BodyFingerprint::Ignore
                },
            };
            Some(At {
                value: spec,
                pos: node.pos,
                path,
            })
        }
        _ => {
            w.error(node.pos, &path, "expected a list such as [method, path, body] or a map such as {body: [amount, currency]}");
            None
        }
    }
}

/// `store_headers: {include: [...], exclude: [...]}` (both optional).
fn store_headers(w: &mut Walker<'_>, f: &Fields<'_>) -> Option<At<StoreHeaders>> {
    let node = f.get("store_headers")?;
    let path = f.path("store_headers");
    if !matches!(node.value, Value::Map(_)) {
        w.error(node.pos, &path, "expected a map such as {exclude: [x-session-token]} or {include: [content-type, location]}");
        return None;
    }
    let map = w.fields(node, &path);
    let include = values(read_list(w, &map, "include", false, values::header_name));
    let exclude = values(read_list(w, &map, "exclude", false, values::header_name));
    Some(At {
        value: StoreHeaders {
            include: include.map(|i| i.value),
            exclude: exclude.map_or_else(Vec::new, |e| e.value),
        },
        pos: node.pos,
        path,
    })
}

/// `[2xx, 4xx]`, `[2xx, 404]`, … (408/409/425/429 are never stored whatever is listed).
fn store_statuses(w: &mut Walker<'_>, f: &Fields<'_>) -> Option<At<StatusSet>> {
    let entries = read_list(w, f, "store_statuses", false, values::status_entry)?;
    let mut set = StatusSet {
        classes: [false; 6],
        codes: Vec::new(),
    };
    for entry in &entries.value {
        match entry.value {
            StatusEntry::Class(class) => set.classes[usize::from(class)] = true,
            StatusEntry::Code(code) if StatusSet::NEVER_STORED.contains(&code) => {
                let message = format!("{code} is never stored: the caller is meant to retry it, so a retry forwards again");
                w.warn(entry.pos, &entry.path, message);
            }
            StatusEntry::Code(code) => set.codes.push(code),
        }
        if matches!(entry.value, StatusEntry::Class(5))
            || matches!(entry.value, StatusEntry::Code(500..))
        {
            let message = "storing 5xx replays a transient upstream failure until `retention` expires, instead of letting a retry through";
            w.warn(entry.pos, &entry.path, message);
        }
    }
    if entries.value.is_empty() {
        w.warn(
            entries.pos,
            &entries.path,
            "no status is stored: every completed request runs again when repeated",
        );
    }
    Some(entries.map(|_| set))
}
