//! Path templates (`/invoices/{invoice_id}/charge`) and the compiled route table.
//! Matching only: no I/O, no body.

use std::sync::Arc;

use http::Method;

use crate::config::RoutePolicy;

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    source: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Capture(String),
}

/// Captured path parameters, percent-decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captures(Vec<(String, String)>);

/// Routes in order; the first match wins.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Arc<RoutePolicy>>,
}

impl PathTemplate {
    /// Parse `/invoices/{invoice_id}/charge`.
    pub fn parse(text: &str) -> Result<PathTemplate, String> {
        let _ = (
            text,
            Segment::Literal(String::new()),
            Segment::Capture(String::new()),
        );
        unimplemented!("path template parsing")
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Names of the captures, in order.
    pub fn capture_names(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Capture(n) => Some(n.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Match a request path (no query); `None` if it does not match.
    pub fn matches(&self, path: &str) -> Option<Captures> {
        let _ = path;
        unimplemented!("path matching")
    }
}

impl Captures {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl RouteTable {
    pub fn new(routes: Vec<Arc<RoutePolicy>>) -> Self {
        RouteTable { routes }
    }

    pub fn routes(&self) -> &[Arc<RoutePolicy>] {
        &self.routes
    }

    /// The first route whose methods and path match.
    pub fn find(&self, method: &Method, path: &str) -> Option<(&Arc<RoutePolicy>, Captures)> {
        let _ = (method, path);
        unimplemented!("route lookup")
    }
}
