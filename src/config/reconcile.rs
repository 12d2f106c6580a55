//! `reconcile:` — how a route asks the upstream whether an attempt whose outcome is
//! unknown happened (SPEC §1 "Unknown outcomes", `on_unknown: reconcile`):
//!
//! ```yaml
//! reconcile:
//!   method: GET                                            # default GET
//!   path: "/v1/charges/search?idempotency_key={key}"       # required
//!   found: [200]                                           # default [200]
//!   found_json: /data/0                                    # optional
//!   absent: [200, 404]                                     # default [404]
//!   timeout: 2s                                            # default 2s
//! ```
//! `{key}` is the upstream key as it was forwarded (percent-encoded); the other
//! placeholders are those of keys, read from the original request (also encoded). The
//! lookup itself, [`Reconcile`], is the route policy's (`policy/reconcile.rs`).
//!
//! `found_json` is for search endpoints, whose "nothing found" is a 200 with an empty
//! list: an RFC 6901 pointer that must exist in the JSON answer and be neither null nor
//! empty (`[]`, `{}`, `""`) for the answer to count as found. Otherwise the answer counts
//! as absent when its status is listed in `absent` (a status may then be in both), else
//! the outcome stays unknown.

use std::time::Duration;

use http::Method;

use super::values;
use super::walk::{At, Walker};
use super::yaml::{Node, Value};
use crate::policy::{LookupPath, Reconcile};

/// `reconcile.timeout` when unset: a lookup is a read, answered quickly or not at all.
const TIMEOUT: Duration = Duration::from_secs(2);

/// An RFC 6901 JSON pointer: empty (the whole answer) or `/`-separated tokens in
/// which `~` is only ever `~0` or `~1`.
fn json_pointer(text: &str) -> Result<String, String> {
    let bad_tilde = text
        .split('~')
        .skip(1)
        .any(|rest| !rest.starts_with('0') && !rest.starts_with('1'));
    if !(text.is_empty() || text.starts_with('/')) || bad_tilde {
        return Err(format!(
            "invalid JSON pointer {text:?}: RFC 6901, e.g. /data/0 (`~0` for ~, `~1` for /)"
        ));
    }
    Ok(text.to_owned())
}

/// Read a `reconcile:` map.
pub(crate) fn read(w: &mut Walker<'_>, node: &Node, path: &str) -> Option<At<Reconcile>> {
    if !matches!(node.value, Value::Map(_)) {
        w.error(
            node.pos,
            path,
            "expected a map with method, path, found, found_json, absent, timeout",
        );
        return None;
    }
    let f = w.fields(node, path);
    let method = w.field(&f, "method", values::method);
    let lookup_path = w.field(&f, "path", LookupPath::parse);
    if f.get("path").is_none() {
        w.error(
            node.pos,
            path,
            "missing path, e.g. path: \"/v1/charges/search?idempotency_key={key}\"",
        );
    }
    let statuses = |w: &mut Walker<'_>, name: &'static str, default: u16| -> Vec<u16> {
        let Some(list) = f.get(name) else {
            return vec![default];
        };
        let mut codes = Vec::new();
        for (item_path, item) in w.list(list, &f.path(name)) {
            let code = w.parsed(item, &item_path, |text| match text.trim().parse::<u16>() {
                Ok(code) if (100..=599).contains(&code) => Ok(code),
                _ => Err(format!("invalid status {text:?}; a code from 100 to 599")),
            });
            codes.extend(code.map(|c| c.value));
        }
        codes
    };
    let found = statuses(w, "found", 200);
    let found_json = w.field(&f, "found_json", json_pointer).map(|p| p.value);
    let absent = statuses(w, "absent", 404);
    // Without `found_json` a status in both lists would mean two things at once; with
    // it, an empty answer with that status is absent and a non-empty one found.
    let both = found.iter().find(|c| absent.contains(c));
    if let (Some(both), None) = (both, &found_json) {
        w.error(
            node.pos,
            path,
            format!(
                "status {both} is in both found and absent; give found_json to tell an \
                 empty answer from one that found the attempt"
            ),
        );
    }
    let timeout = w.duration(&f, "timeout").map_or(TIMEOUT, |t| t.value);
    let lookup_path = lookup_path?.value;
    if lookup_path.source().contains('?') && found_json.is_none() {
        w.warn(
            node.pos,
            path,
            "a lookup with a query string is usually a search, whose empty answer is a \
             200 too: with only a status rule, that empty 200 counts as found and replaces \
             the outcome; add found_json (e.g. /data/0) naming where the attempt must appear",
        );
    }
    Some(At {
        value: Reconcile::new(
            method.map_or(Method::GET, |m| m.value),
            lookup_path,
            found,
            found_json,
            absent,
            timeout,
        ),
        pos: node.pos,
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_follow_rfc_6901() {
        for good in ["", "/data/0", "/a~1b/~0c", "/"] {
            assert_eq!(json_pointer(good).as_deref(), Ok(good));
        }
        for bad in ["data/0", "/a~2", "/a~"] {
            assert!(json_pointer(bad).is_err(), "{bad}");
        }
    }
}
