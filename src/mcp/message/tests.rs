use super::*;
use bytes::Bytes;
use http::HeaderValue;

fn route() -> McpRoute {
    McpRoute {
        tools: vec!["charge_customer".into()],
        describe: true,
    }
}

fn call(id: &str, tool: &str, args: &str, meta: &str) -> BodyView {
    let text = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args},"_meta":{meta}}}}}"#
    );
    BodyView::new(Bytes::from(text))
}

fn headers(pairs: &[(&HeaderName, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.insert((*name).clone(), HeaderValue::from_static(value));
    }
    h
}

#[test]
fn headers_spare_the_body_parse_only_for_what_is_not_protected() {
    let r = route();
    let post = Method::POST;
    assert_eq!(hint(&Method::GET, &HeaderMap::new(), &r), HeaderHint::Pass);
    assert_eq!(
        hint(&Method::DELETE, &HeaderMap::new(), &r),
        HeaderHint::Pass
    );
    assert_eq!(hint(&post, &HeaderMap::new(), &r), HeaderHint::NeedBody);
    let other_tool = headers(&[(&MCP_METHOD, "tools/call"), (&MCP_NAME, "lookup")]);
    assert_eq!(hint(&post, &other_tool, &r), HeaderHint::Pass);
    let ours = headers(&[(&MCP_METHOD, "tools/call"), (&MCP_NAME, "charge_customer")]);
    assert_eq!(hint(&post, &ours, &r), HeaderHint::NeedBody);
    let list = headers(&[(&MCP_METHOD, "tools/list")]);
    assert_eq!(hint(&post, &list, &r), HeaderHint::ToolsList);
    let discover = headers(&[(&MCP_METHOD, "server/discover")]);
    assert_eq!(hint(&post, &discover, &r), HeaderHint::Pass);
}

#[test]
fn id_and_meta_never_change_the_args_hash() {
    let r = route();
    let a = call(
        "1",
        "charge_customer",
        r#"{"amount":5,"cust":"c1"}"#,
        r#"{"progressToken":1}"#,
    );
    let b = call(
        r#""x-2""#,
        "charge_customer",
        r#"{"cust":"c1", "amount":5}"#,
        r#"{"io.modelcontextprotocol/clientInfo":{}}"#,
    );
    let (Message::ToolCall(a), Message::ToolCall(b)) = (
        classify(&a, &HeaderMap::new(), &r),
        classify(&b, &HeaderMap::new(), &r),
    ) else {
        panic!("both are protected calls");
    };
    assert_eq!(a.args_hash, b.args_hash);
    assert_eq!(a.id, serde_json::json!(1));
    assert_eq!(b.id, serde_json::json!("x-2"));
    let c = call("1", "charge_customer", r#"{"amount":6,"cust":"c1"}"#, "{}");
    let Message::ToolCall(c) = classify(&c, &HeaderMap::new(), &r) else {
        panic!()
    };
    assert_ne!(a.args_hash, c.args_hash);
}

#[test]
fn the_body_decides_when_headers_disagree() {
    let r = route();
    let body = call("1", "charge_customer", "{}", "{}");
    let wrong_name = headers(&[(&MCP_METHOD, "tools/call"), (&MCP_NAME, "other")]);
    assert!(matches!(classify(&body, &wrong_name, &r), Message::Other));
    let wrong_method = headers(&[(&MCP_METHOD, "tools/list")]);
    assert!(matches!(classify(&body, &wrong_method, &r), Message::Other));
    let other_tool = call("1", "lookup", "{}", "{}");
    assert!(matches!(
        classify(&other_tool, &HeaderMap::new(), &r),
        Message::Other
    ));
    let notification = BodyView::new(Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"charge_customer"}}"#,
    ));
    assert!(matches!(
        classify(&notification, &HeaderMap::new(), &r),
        Message::Other
    ));
    let batch = BodyView::new(Bytes::from_static(b"[]"));
    assert!(matches!(
        classify(&batch, &HeaderMap::new(), &r),
        Message::Other
    ));
    let list = BodyView::new(Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ));
    assert!(matches!(
        classify(&list, &HeaderMap::new(), &r),
        Message::ToolsList
    ));
}
