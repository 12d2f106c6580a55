//! `breaker:` — a route's circuit breaker (SPEC §1 "Upstream outages"):
//!
//! ```yaml
//! breaker: {after: 5, cool_down: 10s}
//! ```
//!
//! Every call sent into a failing upstream becomes an unknown outcome someone must
//! settle, so after `after` consecutive calls the upstream did not answer, the route
//! stops sending for `cool_down`. Off unless set.

use super::walk::{At, Walker};
use super::yaml::{Node, Value};
use crate::policy::BreakerPolicy;

/// Read a `breaker:` map.
pub(crate) fn read(w: &mut Walker<'_>, node: &Node, path: &str) -> Option<At<BreakerPolicy>> {
    if !matches!(node.value, Value::Map(_)) {
        w.error(
            node.pos,
            path,
            "expected a map with after and cool_down, e.g. {after: 5, cool_down: 10s}",
        );
        return None;
    }
    let f = w.fields(node, path);
    let after = w.count::<u32>(&f, "after");
    let cool_down = w.duration(&f, "cool_down");
    let mut missing = |name: &str, example: &str| {
        w.error(
            node.pos,
            path,
            format!("missing {name}, e.g. {name}: {example}"),
        );
    };
    let (Some(after), Some(cool_down)) = (after, cool_down) else {
        if f.get("after").is_none() {
            missing("after", "5");
        }
        if f.get("cool_down").is_none() {
            missing("cool_down", "10s");
        }
        return None;
    };
    if after.value == 0 {
        w.error(after.pos, &after.path, "after must be at least 1");
        return None;
    }
    if cool_down.value.is_zero() {
        w.error(
            cool_down.pos,
            &cool_down.path,
            "cool_down must be longer than 0s",
        );
        return None;
    }
    Some(At {
        value: BreakerPolicy {
            after: after.value,
            cool_down: cool_down.value,
        },
        pos: node.pos,
        path: path.to_owned(),
    })
}
