//! A route's policy: everything the pipeline needs to know about one route, and what
//! happens to a request no route matches. `config/` builds these from the YAML; the
//! proxy, the key derivation and the route table read them. A leaf below all three, so
//! none of them imports the parser.
//!
//! The enums derive their spelling (`strum`, snake_case): the parser reads it and the
//! route table prints it, so the two never disagree.

mod reconcile;

pub use reconcile::{Found, LookupPath, Reconcile};

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};
use strum::{Display, EnumString, VariantNames};

use crate::path::PathTemplate;
use crate::template::{FieldPath, Template};

/// `default:` — what happens to a request no route matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum DefaultAction {
    Passthrough,
    /// 404 `no_route`.
    Reject,
}

/// Everything the pipeline needs to know about one route.
#[derive(Debug, Clone)]
pub struct RoutePolicy {
    pub name: String,
    /// Methods this route matches. Never empty after validation.
    pub methods: Vec<Method>,
    pub path: PathTemplate,
    /// Key alternatives, in order of preference; never empty.
    pub key: Vec<Template>,
    pub require_key: bool,
    pub max_key_length: usize,
    /// Namespace for keys; `Template::empty()` when unset.
    pub scope: Template,
    pub fingerprint: FingerprintSpec,
    pub store_statuses: StatusSet,
    pub lease: Duration,
    pub retention: Duration,
    pub on_concurrent: OnConcurrent,
    pub wait_timeout: Duration,
    pub on_failure: OnFailure,
    pub on_ambiguous: OnAmbiguous,
    /// What a repeat of an attempt whose outcome is unknown (its lease ended) gets:
    /// unset, `retry` when the route declares `upstream_key_window` and `hold` when it
    /// does not ([`OnUnknown::default_for`]).
    pub on_unknown: OnUnknown,
    /// How long the upstream deduplicates a forwarded key; `None`: nothing says it
    /// does, so `on_unknown: retry` is refused. `retry` forwards again only within it.
    pub upstream_key_window: Option<Duration>,
    /// The lookup of `on_unknown: reconcile` (always set with it, checked at load).
    pub reconcile: Option<Arc<Reconcile>>,
    /// `breaker:` — stop sending to an upstream that stopped answering; off when `None`.
    pub breaker: Option<BreakerPolicy>,
    /// Which response headers a record keeps (credential headers never).
    pub store_headers: StoreHeaders,
    pub max_request_bytes: usize,
    pub max_response_bytes: usize,
    pub forward_key_header: HeaderName,
    pub forward_key_format: KeyFormat,
    /// Lower-case header names whose values bind a record to its caller.
    pub bind_credentials: Vec<HeaderName>,
    /// The credential hash of a request that carries none of `bind_credentials`,
    /// computed on first use (a loaded policy never changes): callers without
    /// credentials, common for a sidecar's local agent, skip a SHA-256 per request.
    pub credentials_absent: std::sync::OnceLock<[u8; 32]>,
    /// `mcp:` — an MCP endpoint whose `tools/call` for these tools is protected and
    /// whose other messages pass through (SPEC §8). `None` on every other route.
    pub mcp: Option<Arc<crate::mcp::McpRoute>>,
}

impl RoutePolicy {
    /// Whether deriving the key or the fingerprint needs the request body.
    pub fn needs_body(&self) -> bool {
        self.key.iter().any(Template::uses_body)
            || self.scope.uses_body()
            || !matches!(self.fingerprint.body, BodyFingerprint::Ignore)
    }

    /// How long after an attempt's first send `on_unknown: retry` may still take it
    /// over: `upstream_key_window` less one lease, because the retried call leaves up
    /// to a lease after the takeover and must reach the provider while it still
    /// deduplicates the key (`idem check` requires the window to exceed the lease).
    pub fn retry_window(&self) -> Option<Duration> {
        self.upstream_key_window
            .map(|window| window.saturating_sub(self.lease))
    }
}

/// What must be identical for a repeat to count as the same request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintSpec {
    pub method: bool,
    pub path: bool,
    pub body: BodyFingerprint,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyFingerprint {
    Ignore,
    /// Canonical JSON when the body is JSON, raw bytes otherwise.
    Whole,
    /// Only these fields of a JSON body (canonical JSON of each, missing = null).
    Fields(Vec<FieldPath>),
}

/// Which upstream statuses are stored and replayed. 401/403/407 and 408/409/425/429
/// never are ([`StatusSet::NEVER_STORED`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    /// Whole classes: index 1..=5 for 1xx..5xx.
    pub classes: [bool; 6],
    pub codes: Vec<u16>,
}

impl StatusSet {
    /// Never stored, whatever `store_statuses` lists: 408/409/425/429 ask the caller to
    /// retry; 401/403/407 refuse the *caller* (its credentials), not the intent, so a
    /// stranger's refused call must not become the owner's stored answer (issue 46 §4).
    pub const NEVER_STORED: [u16; 7] = [401, 403, 407, 408, 409, 425, 429];

    pub fn contains(&self, status: u16) -> bool {
        if Self::NEVER_STORED.contains(&status) {
            return false;
        }
        let class = (status / 100) as usize;
        (class < self.classes.len() && self.classes[class]) || self.codes.contains(&status)
    }
}

impl Default for StatusSet {
    fn default() -> Self {
        StatusSet {
            classes: [false, false, true, false, true, false],
            codes: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnConcurrent {
    Conflict,
    Wait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnFailure {
    Replay,
    Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnAmbiguous {
    Hold,
    Release,
}

/// `store_headers`: the response headers a record keeps, beyond the credential headers
/// that are never kept (SPEC §1 "Stored responses").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreHeaders {
    /// An allow-list: only these are kept. `None`: every end-to-end header.
    pub include: Option<Vec<HeaderName>>,
    /// Never kept, on top of the credential headers.
    pub exclude: Vec<HeaderName>,
}

/// `on_unknown` (SPEC §1 "Unknown outcomes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnUnknown {
    /// Forward again with the same upstream key, within `upstream_key_window`.
    Retry,
    /// Ask the upstream's records first (`reconcile:`).
    Reconcile,
    /// 409 `outcome_unknown` until an operator resolves it.
    Hold,
}

impl OnUnknown {
    /// The default (SPEC §1 "What the code enforces"): forwarding an unknown outcome
    /// again is safe only while the provider still deduplicates its key, so `retry`
    /// only when the route says how long that is, and `hold` otherwise.
    pub fn default_for(upstream_key_window: Option<Duration>) -> OnUnknown {
        match upstream_key_window {
            Some(_) => OnUnknown::Retry,
            None => OnUnknown::Hold,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum KeyFormat {
    Plain,
    /// RFC 8941 sf-string: `"key"`, as the IETF draft sends it.
    #[strum(serialize = "sf-string")]
    SfString,
}

/// `breaker:` — a route's circuit breaker (SPEC §1 "Upstream outages"); its state lives
/// in the proxy (`proxy::breaker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Consecutive unanswered calls (not sent, timed out, reset) that open it.
    pub after: u32,
    /// How long it stays open before one intent is let through as a probe.
    pub cool_down: Duration,
}
