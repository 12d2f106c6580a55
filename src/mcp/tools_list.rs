//! Telling the model that a repeat is safe (SPEC §8): in a `tools/list` answer, each
//! protected tool gets `annotations.idempotentHint: true` and one sentence appended to
//! its description. Other tools and every other value keep their bytes (each is
//! re-emitted from its raw text; only the objects around the edits are re-serialised).

use serde_json::value::RawValue;

use super::raw::{raw, Object};
use super::McpRoute;

/// Appended to a protected tool's description.
pub const SENTENCE: &str = "Repeating a call with the same arguments is safe: it returns the \
first call's result without running the tool again.";

/// The amended message, or `None` when it is not a `tools/list` result or names no
/// protected tool (then the original bytes go out as they are).
pub fn amend(message: &[u8], route: &McpRoute) -> Option<Vec<u8>> {
    let mut envelope: Object = serde_json::from_slice(message).ok()?;
    let result = envelope.get("result")?;
    let mut result: Object = serde_json::from_str(result.get()).ok()?;
    let tools: Vec<Box<RawValue>> = serde_json::from_str(result.get("tools")?.get()).ok()?;
    let mut changed = false;
    let tools: Vec<Box<RawValue>> = tools
        .into_iter()
        .map(|tool| match amend_tool(&tool, route) {
            Some(amended) => {
                changed = true;
                amended
            }
            None => tool,
        })
        .collect();
    if !changed {
        return None;
    }
    result.set("tools", raw(&tools)?);
    envelope.set("result", raw(&result)?);
    serde_json::to_vec(&envelope).ok()
}

fn amend_tool(tool: &RawValue, route: &McpRoute) -> Option<Box<RawValue>> {
    let mut tool: Object = serde_json::from_str(tool.get()).ok()?;
    let name: String = serde_json::from_str(tool.get("name")?.get()).ok()?;
    if !route.protects(&name) {
        return None;
    }
    let description = match tool.get("description") {
        Some(d) => match serde_json::from_str::<String>(d.get()) {
            Ok(text) if text.trim().is_empty() => SENTENCE.to_owned(),
            Ok(text) => format!("{} {SENTENCE}", text.trim_end()),
            Err(_) => return None,
        },
        None => SENTENCE.to_owned(),
    };
    let mut annotations = match tool.get("annotations") {
        Some(a) => serde_json::from_str::<Object>(a.get()).ok()?,
        None => Object::default(),
    };
    annotations.set("idempotentHint", raw(&true)?);
    tool.set("description", raw(&description)?);
    tool.set("annotations", raw(&annotations)?);
    raw(&tool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn route() -> McpRoute {
        McpRoute {
            tools: vec!["charge".into()],
            describe: true,
        }
    }

    #[test]
    fn marks_protected_tools_only_and_keeps_the_rest() {
        let message = br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"charge","description":"Charge a card.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":false}},{"name":"lookup", "inputSchema" : {"type":"object","x":1.50}}],"nextCursor":"c"}}"#;
        let amended = amend(message, &route()).unwrap();
        let text = String::from_utf8(amended.clone()).unwrap();
        // The other tool's bytes are untouched (spacing and number text included).
        assert!(text.contains(r#"{"name":"lookup", "inputSchema" : {"type":"object","x":1.50}}"#));
        let v: Value = serde_json::from_slice(&amended).unwrap();
        let charge = &v["result"]["tools"][0];
        assert_eq!(
            charge["annotations"],
            json!({"readOnlyHint": false, "idempotentHint": true})
        );
        assert_eq!(charge["description"], format!("Charge a card. {SENTENCE}"));
        assert_eq!(v["result"]["nextCursor"], "c");
        assert_eq!(v["id"], 3);
        assert!(v["result"]["tools"][1].get("annotations").is_none());
    }

    #[test]
    fn leaves_other_messages_alone() {
        let other = br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"lookup"}]}}"#;
        assert!(amend(other, &route()).is_none());
        assert!(amend(b"not json", &route()).is_none());
        let notification = br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#;
        assert!(amend(notification, &route()).is_none());
    }
}
