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
}

#[cfg(test)]
pub(crate) mod tests;
