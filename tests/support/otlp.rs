//! An OTLP/HTTP trace receiver: `POST /v1/traces` bodies decoded as the official
//! `ExportTraceServiceRequest` protobuf (the `opentelemetry-proto` crate), kept for the
//! test to inspect. Any other request is counted and refused.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::Link;
use prost::Message;

use super::poll::eventually;
use super::upstream::serve_http;

/// One exported span, flattened out of its resource and scope.
#[derive(Debug, Clone)]
pub struct ExportedSpan {
    pub service: String,
    pub name: String,
    /// `SpanKind` as the protobuf numbers it (2 server, 3 client).
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: Vec<(String, String)>,
    /// (trace id, span id) of each link.
    pub links: Vec<(String, String)>,
}

impl ExportedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    requests: usize,
    /// The headers of each request, in order.
    headers: Vec<http::HeaderMap>,
    spans: Vec<ExportedSpan>,
}

/// A running receiver on a free loopback port.
#[derive(Clone)]
pub struct OtlpReceiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let addr = serve_http("OTLP", move |req| receive(st.clone(), req)).await;
        OtlpReceiver { addr, state }
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Export requests received so far (any path).
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().requests
    }

    /// The headers of every request received so far.
    pub fn headers(&self) -> Vec<http::HeaderMap> {
        self.state.lock().unwrap().headers.clone()
    }

    pub fn spans(&self) -> Vec<ExportedSpan> {
        self.state.lock().unwrap().spans.clone()
    }

    /// Wait until a span matching `want` was exported, and return it.
    pub async fn span(&self, what: &str, want: impl Fn(&ExportedSpan) -> bool) -> ExportedSpan {
        eventually(Duration::from_secs(15), what, async || {
            self.spans().into_iter().find(|s| want(s))
        })
        .await
    }
}

async fn receive(
    state: Arc<Mutex<State>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let headers = req.headers().clone();
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let mut st = state.lock().unwrap();
    st.requests += 1;
    st.headers.push(headers);
    let decoded = body
        .ok()
        .filter(|_| path == "/v1/traces")
        .and_then(|b| ExportTraceServiceRequest::decode(b).ok());
    let Some(export) = decoded else {
        let mut bad = Response::new(Full::new(Bytes::from_static(b"not an OTLP trace export")));
        *bad.status_mut() = StatusCode::BAD_REQUEST;
        return Ok(bad);
    };
    for resource in export.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .and_then(|r| {
                attributes(&r.attributes)
                    .into_iter()
                    .find(|(k, _)| k == "service.name")
            })
            .map(|(_, v)| v)
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                st.spans.push(ExportedSpan {
                    service: service.clone(),
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex::encode(span.trace_id),
                    span_id: hex::encode(span.span_id),
                    parent_span_id: hex::encode(span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    links: span.links.iter().map(link).collect(),
                });
            }
        }
    }
    let body = ExportTraceServiceResponse::default().encode_to_vec();
    let mut ok = Response::new(Full::new(Bytes::from(body)));
    ok.headers_mut()
        .insert("content-type", "application/x-protobuf".parse().unwrap());
    Ok(ok)
}

fn link(link: &Link) -> (String, String) {
    (hex::encode(&link.trace_id), hex::encode(&link.span_id))
}

/// Attribute values as text (strings as they are, others in their debug form).
fn attributes(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}
