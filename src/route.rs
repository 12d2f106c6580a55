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
    let is_slash =
        |w: &[u8]| w[0] == b'%' && matches!((w[1], w[2] | 0x20), (b'2', b'f') | (b'5', b'c'));
    let bytes = path.as_bytes();
    if !bytes.windows(3).any(is_slash) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes.get(i..i + 3).is_some_and(is_slash) {
            out.push(b'/');
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    // Only ASCII escapes were replaced, by ASCII: still UTF-8.
    String::from_utf8(out).ok()
}

#[cfg(test)]
pub(crate) mod tests;
