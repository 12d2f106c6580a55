//! Every error the proxy itself produces: RFC 9457 `application/problem+json` with a
//! stable `code`, and a `detail` written so that a language model reading it knows what
//! happened, whether the side effect happened, and what to do next.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde::Serialize;

use std::sync::Arc;

use crate::mcp::ToolCall;
use crate::policy::OnUnknown;

use super::body::{full, ProxyBody};
use super::headers::{APPLICATION_JSON, PROBLEM_JSON};

/// A proxy-made error response.
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    pub code: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// Seconds, sent as `Retry-After`.
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<u64>,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        code: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            status,
            code,
            title,
            detail: detail.into(),
            retry_after: None,
        }
    }

    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    fn wire(&self) -> Wire<'_> {
        Wire {
            kind: format!("urn:idem:problem:{}", self.code),
            title: self.title,
            status: self.status.as_u16(),
            detail: &self.detail,
            code: self.code,
            retry_after: self.retry_after,
        }
    }

    /// The JSON body, as bytes.
    pub fn body(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(&self.wire()).unwrap_or_default())
    }

    /// The problem on an MCP route, for a `tools/call` with JSON-RPC id `id`: HTTP 200,
    /// a JSON-RPC response whose result is a tool error (`isError: true`, the detail as
    /// text, the problem document as `structuredContent`; SPEC §8).
    /// `modern`: the caller speaks the 2026-07-28 era (its results carry `resultType`).
    pub fn into_tool_error(self, id: &serde_json::Value, modern: bool) -> Response<ProxyBody> {
        let document = serde_json::to_value(self.wire()).unwrap_or_default();
        let body = crate::mcp::answer::tool_error(id, &self.detail, document, modern);
        let mut response = Response::new(full(body));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, APPLICATION_JSON);
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }

    pub fn into_response(self) -> Response<ProxyBody> {
        let mut response = Response::new(full(self.body()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, PROBLEM_JSON);
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// How one request's proxy-made problems are answered: the pipeline's one
/// problem-to-response step (refusals, store and upstream failures, in the flow and in
/// the detached call alike). Every route answers `application/problem+json` (SPEC §5);
/// a protected MCP `tools/call` answers a JSON-RPC tool error for its id (SPEC §8).
#[derive(Debug, Clone, Default)]
pub enum ProblemFormat {
    #[default]
    ProblemJson,
    /// A protected MCP `tools/call`: a tool error for its JSON-RPC id, in its era. (An
    /// `Arc`: this format travels in every call's future, which is copied when spawned.)
    McpToolError(Arc<ToolCall>),
}

impl ProblemFormat {
    pub fn respond(&self, problem: Problem) -> Response<ProxyBody> {
        match self {
            ProblemFormat::ProblemJson => problem.into_response(),
            ProblemFormat::McpToolError(call) => problem.into_tool_error(&call.id, call.modern),
        }
    }
}

// === constructors, one per stable code (SPEC §5) ===

pub fn key_missing(route: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "idempotency_key_missing",
        "Idempotency key missing",
        format!(
            "Route '{route}' needs an idempotency key and none of its key sources were present. \
             Nothing was executed. Resend the same request with the identifying fields or headers \
             this route uses (for example an Idempotency-Key header)."
        ),
    )
}

pub fn key_invalid(reason: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "idempotency_key_invalid",
        "Idempotency key invalid",
        format!("{reason}. Nothing was executed. Fix the key and resend the request."),
    )
}

pub fn body_not_json() -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "body_not_json",
        "Request body is not JSON",
        "This route derives its idempotency key from the JSON body, but the body is not valid \
         JSON. Nothing was executed. Send a valid JSON body.",
    )
}

pub fn body_invalid(reason: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "request_body_invalid",
        "Request body could not be read",
        format!("The request body could not be read ({reason}). Nothing was executed. Resend the complete request."),
    )
}

/// 400 `invalid_body`: the body cannot be read one way only (issue 46 §8).
pub fn invalid_body(reason: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid_body",
        "Request body is ambiguous",
        format!(
            "The request body is refused: {reason}. Nothing was reserved or executed. Send \
             each member once (the value you mean), then send the request again."
        ),
    )
}

/// 503 `overloaded`: the request and response bodies idem holds at once reached
/// `server.max_buffered_bytes` (issue 46 §5).
pub fn overloaded(retry_after: u64) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        "Proxy overloaded",
        format!(
            "idem is holding as many request and response bodies as it may at once, so this \
             request was not read further: nothing was reserved or executed. Retry the same \
             request, with the same key, in {retry_after} s."
        ),
    )
    .retry_after(retry_after)
}

pub fn body_too_large(limit: usize) -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        "Request body too large",
        format!(
            "The request body exceeds this route's limit of {limit} bytes. Nothing was executed. \
             Send a smaller body."
        ),
    )
}

pub fn credential_mismatch() -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "credential_mismatch",
        "Credentials do not match",
        "This idempotency key belongs to a request made with different credentials. Its result \
         is not shown and nothing was executed. Use your own key, or the credentials of the \
         original request.",
    )
}

/// 400 `ambiguous_path`: a path no route matches but one does once its encoded slashes
/// are decoded (`route.rs`, `behind_encoded_slash`); with `default: passthrough` it would
/// otherwise run unprotected on a framework that decodes them.
pub fn ambiguous_path(route: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "ambiguous_path",
        "Ambiguous path",
        format!(
            "The path holds an encoded slash or backslash (%2F, %5C); decoded, it names the \
             protected route '{route}', and idem cannot tell which handler the API would run. \
             Nothing was reserved or executed. Send the path with plain slashes; if the \
             encoded character belongs to an id, the API's owner can add a route for that path."
        ),
    )
}

pub fn no_route(method: &str, path: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no_route",
        "No route",
        format!("No route is configured for {method} {path}. Nothing was executed."),
    )
}

pub fn in_progress(route: &str, retry_after: u64) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "request_in_progress",
        "Request already in progress",
        format!(
            "This '{route}' request is already being processed. Do not send it again with a \
             different key; retry the same request in {retry_after} s to receive its result."
        ),
    )
    .retry_after(retry_after)
}

pub fn response_not_stored(status: u16) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "response_not_stored",
        "Response not stored",
        format!(
            "This request was already executed and completed with status {status}, but its \
             response was not stored (too large, or the proxy was holding too many bodies at \
             the time). It will not be executed again. Look up the result through the API \
             instead of repeating this request."
        ),
    )
}

pub fn key_reused() -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
        "Idempotency key reused with a different request",
        "This idempotency key was already used for a different request (method, path or body \
         differ). Nothing was executed. If this is a new operation, use a new key; if it is a \
         retry, resend exactly the original request.",
    )
}

pub fn upstream_unavailable() -> Problem {
    Problem::new(
        StatusCode::BAD_GATEWAY,
        "upstream_unavailable",
        "Upstream unavailable",
        "The tool API could not be reached, so the request was not sent and nothing was \
         executed. It is safe to retry the same request.",
    )
}

pub fn upstream_timeout(held_for: Option<u64>, on_unknown: OnUnknown) -> Problem {
    let then = match on_unknown {
        OnUnknown::Retry => {
            "then forwarded again with the same idempotency key so the API can deduplicate it"
        }
        OnUnknown::Reconcile => {
            "then idem asks the API whether it was executed and answers with that result, or \
             forwards it again with the same idempotency key if it was not"
        }
        OnUnknown::Hold => {
            "then 409 until a person settles it from the API's records; it is not executed \
             again meanwhile"
        }
    };
    let detail = match held_for {
        Some(seconds) => format!(
            "The tool API did not answer in time. The request was sent, so the outcome is \
             unknown: it may or may not have been executed. Do not send it with a new key. A \
             retry of the same request is answered 409 for up to {seconds} s, {then}."
        ),
        None => "The tool API did not answer in time. The request was sent, so the outcome is \
                 unknown: it may or may not have been executed. A retry of the same request is \
                 forwarded again with the same idempotency key so the API can deduplicate it."
            .to_owned(),
    };
    Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        "upstream_timeout",
        "Upstream timeout",
        detail,
    )
}

/// 409 `record_unreadable`: the stored outcome is sealed with a key this replica does not
/// have (a dropped or missing key), or its readable metadata was altered in the store
/// (the seal binds it). Never executed again.
pub fn record_unreadable(route: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "record_unreadable",
        "Stored result unreadable",
        format!(
            "This '{route}' request was already executed, but its stored result cannot be \
             read here (it is sealed with a key this proxy does not hold, or it was altered \
             in the store). It will not be executed again. Do not send it with a different \
             key; an operator must restore the key, and the same request then returns its \
             result."
        ),
    )
}

/// Why a repeat of an unknown outcome is refused, for the detail a model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownBecause {
    /// `on_unknown: hold`.
    Held,
    /// `on_unknown: retry`, but the attempt is older than `upstream_key_window`.
    KeyWindowPassed,
    /// `on_unknown: reconcile`, and the lookup gave no answer.
    LookupFailed,
}

/// 409 `outcome_unknown`: an earlier attempt was sent and its result is unknown.
/// `retry_after`: when a repeat may be settled (a failed lookup); `None` when only a
/// person settles it.
pub fn outcome_unknown(
    route: &str,
    sent_at_ms: u64,
    because: UnknownBecause,
    retry_after: Option<u64>,
) -> Problem {
    let sent = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(sent_at_ms),
    );
    let next = match (because, retry_after) {
        (UnknownBecause::LookupFailed, Some(seconds)) => format!(
            "idem could not yet ask the tool API whether it happened; retry the same request \
             in {seconds} s to receive its result."
        ),
        (UnknownBecause::KeyWindowPassed, _) => "It is too old to be sent again safely (the \
             tool API no longer deduplicates its key), so it will be settled by a person from \
             the API's records; until then every repeat gets this answer."
            .to_owned(),
        _ => "It will be settled by a person from the tool API's records; until then every \
              repeat gets this answer. Tell the user the outcome is being checked."
            .to_owned(),
    };
    let problem = Problem::new(
        StatusCode::CONFLICT,
        "outcome_unknown",
        "Outcome unknown",
        format!(
            "The first attempt of this '{route}' request was sent at {sent} and its result is \
             unknown: it may or may not have been executed. Do not send it again with a \
             different idempotency key or different arguments: that could execute it twice. \
             {next}"
        ),
    );
    match retry_after {
        Some(seconds) => problem.retry_after(seconds),
        None => problem,
    }
}

pub fn store_unavailable() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        "Idempotency store unavailable",
        "The idempotency store cannot be reached, so the request was not forwarded and nothing \
         was executed. Retry the same request shortly.",
    )
    .retry_after(1)
}

pub fn store_full(max_records: usize) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_full",
        "Idempotency store full",
        format!(
            "The idempotency store holds its maximum of {max_records} records, all of them \
             calls still in flight or whose outcome is unknown, so this new request was not \
             forwarded and nothing was executed. Retry the same request later; an operator \
             must settle the unknown outcomes (or raise store.memory.max_records)."
        ),
    )
    .retry_after(10)
}

pub fn circuit_open(route: &str, retry_after: u64) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "circuit_open",
        "Upstream not answering; calls paused",
        format!(
            "The service behind the '{route}' route stopped answering, so idem paused new \
             calls to it. Nothing was sent and nothing was reserved: this call did not \
             happen. Retry the same request, with the same key, in {retry_after} s."
        ),
    )
    .retry_after(retry_after)
}

/// The owner's lease ended (or was lost) before its request could be written: the
/// send guard (SPEC §1 "What the code enforces") sent nothing and released the
/// reservation, so a retry is forwarded, or replays what another replica did meanwhile.
pub fn lease_lost() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "lease_lost",
        "Reservation lost before sending",
        "idem held this request's reservation too long before it could send it (a stall or \
         a slow connection to the tool API), so it did not send it: nothing was executed by \
         this request. Retry the same request, with the same key, in 1 s: it is sent then, \
         or answered with the result of the copy that ran meanwhile.",
    )
    .retry_after(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_is_rfc9457_json_with_code() {
        let p = in_progress("charge", 3);
        let v: serde_json::Value = serde_json::from_slice(&p.body()).unwrap();
        assert_eq!(v["status"], 409);
        assert_eq!(v["code"], "request_in_progress");
        assert!(v["type"].as_str().unwrap().ends_with("request_in_progress"));
        let r = p.into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }

    #[test]
    fn on_mcp_routes_a_problem_is_a_tool_error_for_the_request_id() {
        let format = ProblemFormat::McpToolError(Arc::new(ToolCall {
            id: serde_json::json!("call-7"),
            tool: "charge".into(),
            args_hash: String::new(),
            exact: true,
            modern: false,
        }));
        let r = format.respond(in_progress("charge", 2));
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn statuses_match_spec_codes() {
        assert_eq!(key_missing("r").status, 400);
        assert_eq!(key_invalid("x").status, 400);
        assert_eq!(body_not_json().status, 400);
        assert_eq!(invalid_body("x").status, 400);
        assert_eq!(overloaded(1).status, 503);
        assert_eq!(
            overloaded(2)
                .into_response()
                .headers()
                .get(header::RETRY_AFTER)
                .unwrap(),
            "2"
        );
        assert_eq!(credential_mismatch().status, 403);
        assert_eq!(no_route("GET", "/").status, 404);
        assert_eq!(response_not_stored(200).status, 409);
        assert_eq!(body_too_large(1).status, 413);
        assert_eq!(key_reused().status, 422);
        assert_eq!(upstream_unavailable().status, 502);
        assert_eq!(store_unavailable().status, 503);
        assert_eq!(upstream_timeout(None, OnUnknown::Retry).status, 504);
        assert_eq!(record_unreadable("charge").status, 409);
        let held = outcome_unknown("charge", 0, UnknownBecause::Held, None);
        assert_eq!(held.status, 409);
        assert!(held
            .into_response()
            .headers()
            .get(header::RETRY_AFTER)
            .is_none());
        let failed = outcome_unknown("charge", 0, UnknownBecause::LookupFailed, Some(2));
        let failed = failed.into_response();
        assert_eq!(failed.headers()[header::RETRY_AFTER], "2");
    }
}
