//! The answer side of a protected `tools/call`: which message is its final response,
//! the replay under the new request's id, and the tool error a proxy-made error becomes.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::raw::{raw, Object};

/// What one JSON-RPC message is to the call with a given id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Final {
    /// Not the response to this call (a notification, a server request, another id).
    NotOurs,
    /// Its final response: a result (any `resultType` but `input_required`, including a
    /// task's `CreateTaskResult` and an `isError: true` tool result) or a JSON-RPC error.
    Response { error: bool },
    /// A non-final result (`resultType: "input_required"`): never stored.
    InputRequired,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ResultHead<'a> {
    #[serde(rename = "resultType", borrow, default)]
    result_type: Option<&'a str>,
}

/// Classify `message` (one JSON-RPC message) for the call with id `id`.
pub fn classify(message: &[u8], id: &Value) -> Final {
    let Ok(envelope) = serde_json::from_slice::<Envelope<'_>>(message) else {
        return Final::NotOurs;
    };
    if envelope.id.as_ref() != Some(id) {
        return Final::NotOurs;
    }
    match (envelope.result, envelope.error) {
        (Some(result), None) => {
            let head = serde_json::from_str::<ResultHead<'_>>(result.get());
            match head {
                Ok(ResultHead {
                    result_type: Some("input_required"),
                }) => Final::InputRequired,
                _ => Final::Response { error: false },
            }
        }
        (None, Some(_)) => Final::Response { error: true },
        _ => Final::NotOurs,
    }
}

#[derive(Serialize)]
struct Reply<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RawValue>,
}

/// The stored response under the new request's id; its `result` / `error` byte for byte,
/// but for `resultType`, adapted to the caller's era (`modern`: 2026-07-28 or later) —
/// a repeat may come from a client of the other era than the first call. A stored
/// message that does not parse (never written by idem) is returned as it is.
pub fn with_id(stored: &[u8], id: &Value, modern: bool) -> Bytes {
    let Ok(envelope) = serde_json::from_slice::<Envelope<'_>>(stored) else {
        return Bytes::copy_from_slice(stored);
    };
    let adapted = envelope.result.and_then(|r| for_era(r, modern));
    let reply = Reply {
        jsonrpc: "2.0",
        id,
        result: adapted.as_deref().or(envelope.result),
        error: envelope.error,
    };
    match serde_json::to_vec(&reply) {
        Ok(bytes) => Bytes::from(bytes),
        Err(_) => Bytes::copy_from_slice(stored),
    }
}

/// `result` with `resultType: "complete"` added for a 2026-07-28 caller, or removed for
/// an older one; `None` when it already fits.
fn for_era(result: &RawValue, modern: bool) -> Option<Box<RawValue>> {
    let mut object: Object = serde_json::from_str(result.get()).ok()?;
    let tag = object.get("resultType").map(RawValue::get);
    match (modern, tag) {
        (true, None) => object.set("resultType", raw(&COMPLETE)?),
        (false, Some(r#""complete""#)) => object.remove("resultType"),
        _ => return None,
    }
    raw(&object)
}

const COMPLETE: &str = "complete";

/// A JSON-RPC response for `id` whose result is a tool error the model can act on:
/// `isError: true`, `detail` as text, and the problem document as `structuredContent`
/// (SPEC §8: an HTTP 4xx/5xx would surface as a transport exception instead).
pub fn tool_error(id: &Value, detail: &str, document: Value, modern: bool) -> Bytes {
    let mut result = serde_json::json!({
        "content": [{"type": "text", "text": detail}],
        "structuredContent": document,
        "isError": true,
    });
    if modern {
        result["resultType"] = Value::from(COMPLETE);
    }
    let message = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result});
    Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
}

/// A JSON-RPC error response for `id` (`null` when the request had none).
pub fn jsonrpc_error(id: &Value, code: i64, message: &str) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_the_final_response_for_its_id_only() {
        let id = json!(7);
        let result = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        assert_eq!(classify(result, &id), Final::Response { error: false });
        let error = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"x"}}"#;
        assert_eq!(classify(error, &id), Final::Response { error: true });
        let other_id = br#"{"jsonrpc":"2.0","id":"7","result":{}}"#;
        assert_eq!(classify(other_id, &id), Final::NotOurs);
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        assert_eq!(classify(progress, &id), Final::NotOurs);
        let request = br#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create"}"#;
        assert_eq!(classify(request, &id), Final::NotOurs);
        let interim = br#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required"}}"#;
        assert_eq!(classify(interim, &id), Final::InputRequired);
        let task = br#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"task","task":{}}}"#;
        assert_eq!(classify(task, &id), Final::Response { error: false });
    }

    #[test]
    fn replay_takes_the_new_id_as_sent_and_keeps_the_result_bytes() {
        let stored = br#"{"jsonrpc":"2.0","id":1,"result":{"z":1,"a":[1.50, "x"]}}"#;
        let replay = with_id(stored, &json!("req-9"), false);
        assert_eq!(
            &replay[..],
            br#"{"jsonrpc":"2.0","id":"req-9","result":{"z":1,"a":[1.50, "x"]}}"#
        );
        let replay = with_id(stored, &json!(42), false);
        assert!(replay.starts_with(br#"{"jsonrpc":"2.0","id":42,"#));
    }

    #[test]
    fn replay_fits_the_result_to_the_callers_era() {
        let session = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        let modern = with_id(session, &json!(2), true);
        assert_eq!(
            &modern[..],
            br#"{"jsonrpc":"2.0","id":2,"result":{"content":[],"resultType":"complete"}}"#
        );
        let back = with_id(&modern, &json!(3), false);
        assert_eq!(
            &back[..],
            br#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#
        );
        let task = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task"}}"#;
        assert!(with_id(task, &json!(1), false).ends_with(br#"{"resultType":"task"}}"#));
    }

    #[test]
    fn tool_error_is_a_result_with_is_error() {
        let body = tool_error(
            &json!("a"),
            "busy",
            json!({"code": "request_in_progress"}),
            true,
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "a");
        assert_eq!(v["result"]["isError"], true);
        assert_eq!(v["result"]["content"][0]["text"], "busy");
        assert_eq!(
            v["result"]["structuredContent"]["code"],
            "request_in_progress"
        );
    }
}
