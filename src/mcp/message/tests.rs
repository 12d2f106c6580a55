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
fn every_post_is_read_whatever_its_headers_say() {
    let r = route();
    let post = Method::POST;
    assert_eq!(hint(&Method::GET, &HeaderMap::new(), &r), HeaderHint::Pass);
    assert_eq!(
        hint(&Method::DELETE, &HeaderMap::new(), &r),
        HeaderHint::Pass
    );
    assert_eq!(hint(&post, &HeaderMap::new(), &r), HeaderHint::NeedBody);
    let other_tool = headers(&[(&MCP_METHOD, "tools/call"), (&MCP_NAME, "lookup")]);
    assert_eq!(hint(&post, &other_tool, &r), HeaderHint::NeedBody);
    let ping = headers(&[(&MCP_METHOD, "ping")]);
    assert_eq!(hint(&post, &ping, &r), HeaderHint::NeedBody);
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
fn headers_that_disagree_with_the_body_are_refused() {
    let r = route();
    let body = call("1", "charge_customer", "{}", "{}");
    let refused = |h: &HeaderMap, body: &BodyView| match classify(body, h, &r) {
        Message::Refused(Refusal::HeaderMismatch { id, detail }) => Some((id, detail)),
        _ => None,
    };
    let wrong_name = headers(&[(&MCP_METHOD, "tools/call"), (&MCP_NAME, "other")]);
    let (id, detail) = refused(&wrong_name, &body).expect("mismatched name");
    assert_eq!(id, serde_json::json!(1));
    assert!(detail.contains("Mcp-Name"), "{detail}");
    let ping = headers(&[(&MCP_METHOD, "ping")]);
    assert!(refused(&ping, &body).is_some());
    let wrong_method = headers(&[(&MCP_METHOD, "tools/list")]);
    assert!(refused(&wrong_method, &body).is_some());
    let agreeing = headers(&[(&MCP_METHOD, "tools/call"), (&MCP_NAME, "charge_customer")]);
    assert!(matches!(
        classify(&body, &agreeing, &r),
        Message::ToolCall(_)
    ));
    // `=?base64?…?=`: "charge_customer".
    let encoded = headers(&[(&MCP_NAME, "=?base64?Y2hhcmdlX2N1c3RvbWVy?=")]);
    assert!(matches!(
        classify(&body, &encoded, &r),
        Message::ToolCall(_)
    ));
    let unprotected = call("1", "lookup", "{}", "{}");
    let named = headers(&[(&MCP_METHOD, "tools/call"), (&MCP_NAME, "lookup")]);
    assert!(matches!(classify(&unprotected, &named, &r), Message::Other));
}

#[test]
fn batches_with_a_protected_call_and_duplicate_members_are_refused() {
    let r = route();
    let batch = BodyView::new(Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"charge_customer"}},{"jsonrpc":"2.0","method":"notifications/x"}]"#,
    ));
    let Message::Refused(Refusal::Batch { requests, .. }) = classify(&batch, &HeaderMap::new(), &r)
    else {
        panic!("refused")
    };
    assert_eq!(
        requests,
        [
            (serde_json::json!(1), None),
            (serde_json::json!("c"), Some("charge_customer".to_owned()))
        ]
    );
    let harmless = BodyView::new(Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup"}}]"#,
    ));
    assert!(matches!(
        classify(&harmless, &HeaderMap::new(), &r),
        Message::Other
    ));
    let twice = BodyView::new(Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"charge_customer","name":"lookup"}}"#,
    ));
    let Message::Refused(Refusal::Duplicate { id, tool_call, .. }) =
        classify(&twice, &HeaderMap::new(), &r)
    else {
        panic!("refused")
    };
    assert_eq!((id, tool_call), (Some(serde_json::json!(4)), true));
}

#[test]
fn the_body_decides() {
    let r = route();
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

/// A body idem cannot read could still be a protected call to a lenient server (pydantic
/// reads `NaN` and deeper nesting than serde_json's 128 levels): refused, never passed.
#[test]
fn a_body_idem_cannot_read_is_refused() {
    let r = route();
    let nan = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_customer","arguments":{"amount":NaN}}}"#;
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"charge_customer","arguments":{{"x":{}{}}}}}}}"#,
        "[".repeat(150),
        "]".repeat(150)
    );
    for body in [nan.to_owned(), deep, "{".to_owned(), String::new()] {
        let view = BodyView::new(Bytes::from(body.clone()));
        assert!(
            matches!(
                classify(&view, &HeaderMap::new(), &r),
                Message::Refused(Refusal::Unreadable)
            ),
            "{body:.60}"
        );
    }
    // JSON that is no JSON-RPC message cannot call a tool: the server answers it.
    let scalar = BodyView::new(Bytes::from_static(b"\"tools/call\""));
    assert!(matches!(
        classify(&scalar, &HeaderMap::new(), &r),
        Message::Other
    ));
}
