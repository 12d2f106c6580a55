//! The spans of one protected request: a server span (child of the caller's
//! `traceparent`, or the root of a new trace), children for each store operation and
//! the upstream call, and the link from a replay to the execution it replays.
//!
//! Made only when traces are on: the pipeline carries it in the request's context
//! (`proxy::RequestContext`), from the flow to the detached call and its lease; the
//! latency histograms take their exemplar from it ([`RequestTrace::exemplar`]).

use std::fmt;

use http::{HeaderMap, HeaderValue, Method, Request};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::trace::Span;

use super::Traces;
use crate::store_key::StoreKey;
use crate::vocabulary::{Outcome, StoreOp};

/// The trace and span of the execution that produced a record, kept in the record so a
/// replay's span can link to it. Written as `<32 hex>-<16 hex>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceLink {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

/// One protected request's server span, in the context its children start from.
#[derive(Clone, Debug)]
pub struct RequestTrace {
    traces: Traces,
    cx: Context,
}

impl RequestTrace {
    /// Start the server span of a request matched to the route named `route` (its path
    /// template `template`), as a child of the caller's `traceparent` (and `tracestate`)
    /// when it sent a valid one.
    pub fn start(
        traces: &Traces,
        method: &Method,
        route: &str,
        template: &str,
        headers: &HeaderMap,
    ) -> RequestTrace {
        let parent = traces.propagator.extract(&HeaderExtractor(headers));
        // The name and attributes are set only once the sampler has said yes: an
        // unsampled request (most of them at a low ratio) allocates none of them. The
        // standard samplers decide on the trace id and the parent alone.
        let span = traces
            .tracer
            .span_builder("idem.request")
            .with_kind(SpanKind::Server)
            .start_with_context(&traces.tracer, &parent);
        let cx = parent.with_span(span);
        let span = cx.span();
        if span.is_recording() {
            span.update_name(format!("{method} {template}"));
            span.set_attribute(KeyValue::new(
                "http.request.method",
                method.as_str().to_owned(),
            ));
            span.set_attribute(KeyValue::new("http.route", template.to_owned()));
            span.set_attribute(KeyValue::new("idem.route", route.to_owned()));
        }
        RequestTrace {
            traces: traces.clone(),
            cx,
        }
    }

    /// This request's trace id for a latency histogram's exemplar; `None` when not
    /// sampled, since an exemplar pointing at a trace nobody exported is a dead link.
    pub fn exemplar(&self) -> Option<u128> {
        let span = self.cx.span();
        let cx = span.span_context();
        let id = u128::from_be_bytes(cx.trace_id().to_bytes());
        cx.is_sampled().then_some(id)
    }

    /// What a record produced by this request keeps: `None` when the span is not
    /// recorded (sampled out), since a link to it would lead nowhere.
    pub fn link(&self) -> Option<TraceLink> {
        let span = self.cx.span();
        let cx = span.span_context();
        cx.is_sampled().then(|| TraceLink {
            trace_id: cx.trace_id().to_bytes(),
            span_id: cx.span_id().to_bytes(),
        })
    }

    /// Link this request's span to the execution that produced the record it was
    /// answered from (a replay, or a refusal because of that record).
    pub fn link_to(&self, record: Option<&TraceLink>, relation: &'static str) {
        let Some(link) = record else { return };
        let target = SpanContext::new(
            TraceId::from_bytes(link.trace_id),
            SpanId::from_bytes(link.span_id),
            TraceFlags::SAMPLED,
            true,
            TraceState::NONE,
        );
        let attributes = vec![KeyValue::new("idem.link", relation)];
        self.cx.span().add_link(target, attributes);
    }

    /// This request executes `attempt` of its intent upstream.
    pub fn executes(&self, attempt: u32) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("idem.attempt", i64::from(attempt)));
        span.set_attribute(KeyValue::new("idem.replayed", false));
    }

    /// This request is answered with the stored outcome of `attempt`, produced by the
    /// execution `record` names.
    pub fn replays(&self, record: Option<&TraceLink>, attempt: u32) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("idem.attempt", i64::from(attempt)));
        span.set_attribute(KeyValue::new("idem.replayed", true));
        self.link_to(record, "replays");
    }

    /// The MCP tool a protected `tools/call` calls.
    pub fn tool(&self, name: &str) {
        let span = self.cx.span();
        if !span.is_recording() {
            return;
        }
        span.set_attribute(KeyValue::new("mcp.method.name", "tools/call"));
        span.set_attribute(KeyValue::new("gen_ai.tool.name", name.to_owned()));
    }

    /// Record how the request ended and end the server span.
    pub fn finish(&self, outcome: Outcome, status: u16, key: Option<&StoreKey>) {
        let span = self.cx.span();
        if span.is_recording() {
            span.set_attribute(KeyValue::new("idem.outcome", outcome.as_str()));
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
            if let Some(key) = key {
                // The store key is already a hash of (route, scope, key): never the raw key.
                span.set_attribute(KeyValue::new("idem.key_hash", key.to_string()));
            }
            if status >= 500 {
                span.set_status(Status::error(format!("{status}")));
            }
        }
        span.end();
    }

    /// A child span for one store round trip; end it with [`Span::end`].
    /// `None` when the request is not sampled: its children would not be recorded.
    pub fn store_op(&self, op: StoreOp) -> Option<Span> {
        if !self.recording() {
            return None;
        }
        let name = match op {
            StoreOp::Reserve => "idem.store reserve",
            StoreOp::Renew => "idem.store renew",
            StoreOp::Complete => "idem.store complete",
            StoreOp::Release => "idem.store release",
            StoreOp::Takeover => "idem.store takeover",
        };
        let tracer = &self.traces.tracer;
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes([KeyValue::new("idem.store.op", op.as_str())])
            .start_with_context(tracer, &self.cx);
        Some(span)
    }

    /// Whether this request's span is recorded (sampled). Unsampled requests skip their
    /// child spans (a dropped span still costs its building) but still propagate.
    fn recording(&self) -> bool {
        self.cx.span().is_recording()
    }

    /// The client span of the upstream call, whose context goes to the upstream as its
    /// `traceparent` (and `tracestate`), replacing the caller's. Unsampled: no span, and
    /// the request's own (unsampled) context is passed on.
    pub fn upstream<B>(&self, request: &mut Request<B>) -> Option<Span> {
        if !self.recording() {
            inject(request.headers_mut(), self.cx.span().span_context());
            return None;
        }
        let tracer = &self.traces.tracer;
        let span = tracer
            .span_builder(format!("{} upstream", request.method()))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("http.request.method", request.method().as_str().to_owned()),
                KeyValue::new("url.path", request.uri().path().to_owned()),
            ])
            .start_with_context(tracer, &self.cx);
        inject(request.headers_mut(), span.span_context());
        Some(span)
    }
}

/// Writes `parent` as the W3C `traceparent` (and `tracestate`, when it has one),
/// replacing the caller's. The same header `TraceContextPropagator::inject` writes, in
/// one buffer: its `format!` of four fields cost ~4k instructions per request, paid by
/// every unsampled request too (they must pass on their "not sampled" decision).
fn inject(headers: &mut HeaderMap, parent: &SpanContext) {
    headers.remove("tracestate");
    if !parent.is_valid() {
        headers.remove("traceparent");
        return;
    }
    // "00-" trace id (32 hex) "-" span id (16 hex) "-" flags (2 hex)
    let mut value = *b"00-00000000000000000000000000000000-0000000000000000-00";
    let hex_into = |bytes: &[u8], out: &mut [u8]| {
        // The lengths are fixed above.
        crate::fast_hex::encode_into(bytes, out);
    };
    hex_into(&parent.trace_id().to_bytes(), &mut value[3..35]);
    hex_into(&parent.span_id().to_bytes(), &mut value[36..52]);
    hex_into(&[parent.trace_flags().to_u8()], &mut value[53..55]);
    if let Ok(value) = HeaderValue::from_bytes(&value) {
        headers.insert("traceparent", value);
    }
    let state = parent.trace_state().header();
    if !state.is_empty() {
        if let Ok(state) = HeaderValue::from_str(&state) {
            headers.insert("tracestate", state);
        }
    }
}

/// Record the upstream's answer on its span and end it.
pub fn end_upstream(mut span: Span, status: Option<u16>, failure: Option<&str>) {
    if let Some(status) = status {
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    if let Some(reason) = failure {
        span.set_status(Status::error(reason.to_owned()));
    }
    span.end();
}

impl TraceLink {
    /// Parse the `Display` form.
    pub fn parse(text: &str) -> Option<TraceLink> {
        let (trace, span) = text.split_once('-')?;
        Some(TraceLink {
            trace_id: crate::fast_hex::decode(trace.as_bytes())?,
            span_id: crate::fast_hex::decode(span.as_bytes())?,
        })
    }

    pub fn trace_id_hex(&self) -> String {
        crate::fast_hex::encode(&self.trace_id)
    }
}

impl TraceLink {
    /// The `Display` form, `<32 hex>-<16 hex>`, without allocating (the record codec
    /// writes it on every traced reservation).
    pub fn hex(&self) -> [u8; 49] {
        let mut out = [b'-'; 49];
        // 32 and 16 bytes of room for 16 and 8 bytes of input.
        crate::fast_hex::encode_into(&self.trace_id, &mut out[..32]);
        crate::fast_hex::encode_into(&self.span_id, &mut out[33..]);
        out
    }
}

impl fmt::Display for TraceLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(&self.hex()).map_err(|_| fmt::Error)?)
    }
}
