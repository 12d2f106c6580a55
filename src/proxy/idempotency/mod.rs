//! The protected flow of one request (SPEC §1 steps 2–5): read the body, derive the
//! intent, reserve its key, and either forward (winner), replay, or refuse (loser).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::request;
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use super::breaker::{Breaker, Ticket};
use super::context::RequestContext;
use super::execute::{self, Call};
use super::forward::upstream_request;
use super::intent::{key_problem, read_body, Intent};
use super::problem::{self, Problem, ProblemFormat};
use super::Handled;
use crate::body::BodyView;
use crate::key::{self, StoreKey};
use crate::mcp::ToolCall;
use crate::path::Captures;
use crate::policy::RoutePolicy;
use crate::store::config::OnStoreError;
use crate::store::Record;
use crate::vocabulary::Outcome;

/// A matched request before its body is read.
pub struct Inbound {
    pub policy: Arc<RoutePolicy>,
    pub captures: Captures,
    pub parts: request::Parts,
    pub client_ip: Option<IpAddr>,
    pub on_store_error: OnStoreError,
    /// The route's circuit breaker, when it has one (`breaker:`).
    pub breaker: Option<Arc<Breaker>>,
}

mod open_breaker;
mod reserve;
mod respond;
mod unknown;

/// One protected request on its way through the flow.
struct Flow<'a> {
    cx: &'a RequestContext,
    policy: Arc<RoutePolicy>,
    parts: request::Parts,
    /// The route's path captures (keys, and a reconciliation lookup's path).
    captures: Captures,
    body: BodyView,
    client_ip: Option<IpAddr>,
    on_store_error: OnStoreError,
    breaker: Option<Arc<Breaker>>,
    /// Leave from the route's breaker to send this intent (taken before reserving).
    ticket: Option<Ticket>,
    /// How this request's problems are answered.
    format: ProblemFormat,
    /// The protected MCP call, on an MCP route (replays take its id).
    mcp: Option<Arc<ToolCall>>,
    key: Option<StoreKey>,
    store_time: Duration,
    /// When the last store round trip was asked for: the lease a reservation or
    /// takeover grants is counted from here on this process's clock.
    asked: Option<Instant>,
}

/// Read the body (bounded) and protect the request.
pub async fn protect(cx: &RequestContext, inbound: Inbound, body: Incoming) -> Handled {
    let limit = inbound.policy.max_request_bytes;
    let raw = read_body(body, &inbound.parts.headers, limit, &cx.worker).await;
    let view = BodyView::new(raw.as_ref().cloned().unwrap_or_default());
    let mut flow = Flow::new(cx, inbound, view, None);
    if let Err(p) = raw {
        return flow.refuse(p, Outcome::Rejected);
    }
    // The same steps as `protect_read`, written out: the flow stays a local of this
    // future instead of moving into a nested one (the hot path of every route).
    match flow.derive() {
        Derived::Reserve(intent) => flow.reserve(intent).await,
        Derived::Unprotected => Box::pin(flow.unprotected(Outcome::Passthrough)).await,
        Derived::Refuse(p) => flow.refuse(p, Outcome::Rejected),
    }
}

/// Protect a request whose body is already read: derive its intent and reserve it.
/// `mcp`: the protected `tools/call` of an MCP route, whose problems are tool errors.
pub async fn protect_read(
    cx: &RequestContext,
    inbound: Inbound,
    body: BodyView,
    mcp: Option<ToolCall>,
) -> Handled {
    if let (Some(trace), Some(call)) = (cx.trace(), &mcp) {
        trace.tool(&call.tool);
    }
    let mut flow = Flow::new(cx, inbound, body, mcp.map(Arc::new));
    if flow.mcp.as_ref().is_some_and(|call| !call.exact) {
        let p = problem::key_invalid(
            "the tool arguments have a number with more digits than a 64-bit float holds; \
             send such numbers as JSON strings",
        );
        return flow.refuse(p, Outcome::Rejected);
    }
    match flow.derive() {
        Derived::Reserve(intent) => flow.reserve(intent).await,
        Derived::Unprotected => Box::pin(flow.unprotected(Outcome::Passthrough)).await,
        Derived::Refuse(p) => flow.refuse(p, Outcome::Rejected),
    }
}

/// What the request's intent leads to.
enum Derived {
    Reserve(Intent),
    /// No key, and the route does not require one.
    Unprotected,
    Refuse(Problem),
}

impl<'a> Flow<'a> {
    fn new(
        cx: &'a RequestContext,
        inbound: Inbound,
        body: BodyView,
        mcp: Option<Arc<ToolCall>>,
    ) -> Flow<'a> {
        let format = match &mcp {
            Some(call) => ProblemFormat::McpToolError(call.clone()),
            None => ProblemFormat::default(),
        };
        Flow {
            cx,
            policy: inbound.policy,
            parts: inbound.parts,
            captures: inbound.captures,
            body,
            client_ip: inbound.client_ip,
            on_store_error: inbound.on_store_error,
            breaker: inbound.breaker,
            ticket: None,
            format,
            mcp,
            key: None,
            store_time: Duration::ZERO,
            asked: None,
        }
    }

    /// Derive the intent (key, scope, fingerprint, credentials) from the request.
    fn derive(&mut self) -> Derived {
        let mcp = self.mcp.as_deref();
        let captures = &self.captures;
        let sealing = self.cx.worker.store.sealing();
        match Intent::derive(
            &self.policy,
            &self.parts,
            captures,
            &self.body,
            mcp,
            sealing,
        ) {
            Ok(Some(intent)) => {
                self.key = Some(intent.store_key);
                Derived::Reserve(intent)
            }
            Ok(None) if !self.policy.require_key => Derived::Unprotected,
            Ok(None) => Derived::Refuse(problem::key_missing(&self.policy.name)),
            Err(e) => Derived::Refuse(key_problem(e)),
        }
    }

    /// We own the key: forward once, with the key passed on, in a detached task.
    ///
    /// Not `async`: the flow is consumed here, and only what the answer needs waits
    /// for it ([`Forwarded`]); an `async fn` would copy the whole flow and the record
    /// into its future first.
    fn forward(self, intent: &Intent, record: Record) -> Forwarded {
        let policy = &self.policy;
        let upstream_key = key::upstream_key(&intent.key, record.attempt);
        let key_value = key::forward_key_value(&upstream_key, policy.forward_key_format);
        if let Some(trace) = self.cx.trace() {
            trace.executes(record.attempt);
        }
        let request = upstream_request(
            &self.cx.worker.upstream.url,
            self.parts,
            Either::Left(Full::new(self.body.raw().clone())),
            self.client_ip,
            Some((&policy.forward_key_header, key_value)),
        );
        let call = Call {
            policy: policy.clone(),
            format: self.format.clone(),
            mcp: self.mcp.clone(),
            key: intent.store_key,
            record,
            // Forwarding always follows the store write that granted the lease.
            asked: self.asked.unwrap_or_else(Instant::now),
            request,
            ticket: self.ticket,
        };
        Forwarded {
            started: Instant::now(),
            answer: execute::spawn(self.cx.clone(), call),
            format: self.format,
            key: self.key,
            store_time: self.store_time,
        }
    }
}

/// A call sent on its way, and what its caller's answer needs.
struct Forwarded {
    answer: tokio::sync::oneshot::Receiver<http::Response<super::body::ProxyBody>>,
    format: ProblemFormat,
    key: Option<StoreKey>,
    store_time: Duration,
    started: Instant,
}

impl Forwarded {
    async fn answered(self) -> Handled {
        let response = match self.answer.await {
            Ok(response) => response,
            Err(_) => self.format.respond(problem::upstream_unavailable()),
        };
        Handled::answered(response, Outcome::Forwarded)
            .keyed(self.key, self.store_time)
            .upstream_since(self.started)
    }
}
