//! The compiled route table: method + path template, first match wins (SPEC §1 step 1).
//! Matching only: no I/O, no body. The path language is [`crate::path`].

use std::sync::Arc;

use http::Method;

use crate::path::Captures;
use crate::policy::RoutePolicy;

/// Routes in order; the first match wins.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Arc<RoutePolicy>>,
}

// === impl RouteTable ===

impl RouteTable {
    pub fn new(routes: Vec<Arc<RoutePolicy>>) -> Self {
        RouteTable { routes }
    }

    pub fn routes(&self) -> &[Arc<RoutePolicy>] {
        &self.routes
    }

    /// The first route whose methods and path match. Allocation-free on a miss.
    pub fn find(&self, method: &Method, path: &str) -> Option<(&Arc<RoutePolicy>, Captures)> {
        self.routes.iter().find_map(|route| {
            if !route.methods.contains(method) {
                return None;
            }
            route.path.matches(path).map(|captures| (route, captures))
        })
    }

    /// For a path no route matched: the route it would match once its encoded slashes
    /// and backslashes (`%2F`, `%5C`) are decoded, as some frameworks decode them before
    /// routing (Starlette sends `/invoices/X%2Fcharge` to the charge handler). idem
    /// cannot tell which handler the upstream picks, so such a path must not pass
    /// unprotected, nor be keyed as that route (another handler's answer would be stored
    /// under its key). Allocation-free unless the path holds such an escape.
    pub fn behind_encoded_slash(&self, method: &Method, path: &str) -> Option<&Arc<RoutePolicy>> {
        let decoded = decode_slashes(path)?;
        self.find(method, &decoded).map(|(route, _)| route)
    }
}

/// `path` with `%2F` and `%5C` (either case) turned into `/`, or `None` if it has neither.
fn decode_slashes(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let escaped = |i: usize| {
        bytes[i] == b'%'
            && matches!(
                (bytes.get(i + 1), bytes.get(i + 2)),
                (Some(b'2'), Some(b'f' | b'F')) | (Some(b'5'), Some(b'c' | b'C'))
            )
    };
    let first = (0..bytes.len()).find(|&i| escaped(i))?;
    let mut out = String::with_capacity(path.len());
    out.push_str(&path[..first]);
    let mut i = first;
    while i < bytes.len() {
        if escaped(i) {
            out.push('/');
            i += 3;
        } else {
            let next = (i + 1..bytes.len())
                .find(|&j| escaped(j))
                .unwrap_or(bytes.len());
            out.push_str(&path[i..next]);
            i = next;
        }
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests;
