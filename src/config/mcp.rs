//! A route's `mcp:` section (SPEC §8): which tools of an MCP endpoint are protected, and
//! the defaults such a route gets (its methods and its key).

use super::walk::{At, Walker};
use super::yaml::Node;
use crate::mcp::McpRoute;
use crate::template::{Part, Source, Template};

/// The key of an MCP route that sets none: the tool and its canonical arguments.
pub(crate) const MCP_KEY: &str = "{mcp.tool}:{mcp.args_hash}";

/// Read `mcp: {tools: [...], describe: bool}`; `None` when invalid (reported).
pub(crate) fn read(w: &mut Walker<'_>, node: &Node, path: &str) -> Option<At<McpRoute>> {
    let f = w.fields(node, path);
    let describe = w.flag(&f, "describe").is_none_or(|a| a.value);
    let Some(tools_node) = f.get("tools") else {
        w.error(
            node.pos,
            &f.path("tools"),
            "missing: list the tools whose calls are made idempotent, e.g. tools: [charge_customer]",
        );
        return None;
    };
    let errors_before = w.errors.len();
    let mut tools = Vec::new();
    for (item_path, item) in w.list(tools_node, &f.path("tools")) {
        if let Some(name) = w.text(item, &item_path) {
            if name.value.is_empty() {
                w.error(name.pos, &item_path, "empty tool name");
            } else {
                tools.push(name.value);
            }
        } else {
            w.error(item.pos, &item_path, "expected a tool name");
        }
    }
    if tools.is_empty() && w.errors.len() == errors_before {
        let message = "list at least one tool, e.g. [charge_customer]";
        w.error(tools_node.pos, &f.path("tools"), message);
    }
    (w.errors.len() == errors_before).then(|| At {
        value: McpRoute { tools, describe },
        pos: node.pos,
        path: path.to_owned(),
    })
}

/// What an MCP route's key and scope may not use, and what only an MCP route may use:
/// the JSON-RPC `id`, `params._meta` and the session id change with every repeat, and
/// `{body_hash}` covers the id.
pub(crate) fn check_template(w: &mut Walker<'_>, at: &At<Template>, mcp: bool) {
    for part in at.value.parts() {
        let Part::Placeholder(source) = part else {
            continue;
        };
        let problem = match source {
            Source::McpTool | Source::McpArgsHash if !mcp => Some(
                "{mcp.*} placeholders need an `mcp:` section on the route".to_owned(),
            ),
            Source::BodyHash if mcp => Some(
                "{body_hash} covers the JSON-RPC id, which changes with every repeat; use {mcp.args_hash}".to_owned(),
            ),
            Source::Body(path) if mcp && !stable_body_path(path.segments()) => Some(format!(
                "{{body.{path}}} changes with every repeat of an MCP call; use fields under params.arguments or {{mcp.tool}}"
            )),
            Source::Header(name) if mcp && name.as_str() == "mcp-session-id" => Some(
                "the session id changes with every new session; a repeat from a new session must find the same key".to_owned(),
            ),
            _ => None,
        };
        if let Some(message) = problem {
            w.error(at.pos, &at.path, message);
        }
    }
}

/// Body paths an MCP key may use: anything but the `id` and `params._meta`.
pub(crate) fn stable_body_path(segments: &[String]) -> bool {
    match segments {
        [first, ..] if first == "id" => false,
        [first, second, ..] if first == "params" && second == "_meta" => false,
        [only] if only == "params" => false,
        _ => true,
    }
}
