use super::*;
use sha2::{Digest, Sha256};

fn parts(text: &str) -> Vec<Part> {
    Template::parse(text).unwrap().parts().to_vec()
}

fn lit(s: &str) -> Part {
    Part::Literal(s.to_owned())
}

fn ph(source: Source) -> Part {
    Part::Placeholder(source)
}

fn field(path: &str) -> Source {
    Source::Body(FieldPath::parse(path).unwrap())
}

#[test]
fn parses_every_placeholder_kind() {
    assert_eq!(
        parts("charge:{path.invoice_id}"),
        [lit("charge:"), ph(Source::Path("invoice_id".into()))]
    );
    assert_eq!(
        parts("{body.a.b.0.c}{query.q}-{header.X-Task-Id}"),
        [
            ph(field("a.b.0.c")),
            ph(Source::Query("q".into())),
            lit("-"),
            ph(Source::Header(HeaderName::from_static("x-task-id"))),
        ]
    );
    assert_eq!(
        parts("{method} {route} {body_hash}"),
        [
            ph(Source::Method),
            lit(" "),
            ph(Source::Route),
            lit(" "),
            ph(Source::BodyHash),
        ]
    );
}

#[test]
fn doubled_braces_are_literal_and_merge() {
    assert_eq!(parts("{{a}}"), [lit("{a}")]);
    assert_eq!(
        parts("x{{{method}}}y"),
        [lit("x{"), ph(Source::Method), lit("}y")]
    );
    assert_eq!(parts("é{{ü"), [lit("é{ü")]);
    assert!(parts("").is_empty());
    assert!(Template::parse("").unwrap().is_empty());
}

#[test]
fn keeps_source_and_reports_uses() {
    let t = Template::parse("t:{body.id}:{path.a}:{path.b}").unwrap();
    assert_eq!(t.as_str(), "t:{body.id}:{path.a}:{path.b}");
    assert!(t.uses_body());
    assert_eq!(t.path_names().collect::<Vec<_>>(), ["a", "b"]);
    assert!(Template::parse("{body_hash}").unwrap().uses_body());
    assert!(!Template::parse("{header.x}").unwrap().uses_body());
}

#[test]
fn rejects_malformed_templates() {
    use TemplateError::*;
    let e = |t: &str| Template::parse(t).unwrap_err();
    assert_eq!(e("a{path.x"), Unclosed(1));
    assert_eq!(e("a}b"), UnmatchedClose(1));
    assert_eq!(e("{nope}"), Unknown("nope".into()));
    assert_eq!(e("{}"), Unknown("".into()));
    assert_eq!(e("{path}"), Unknown("path".into()));
    assert_eq!(e("{cookie.a}"), Unknown("cookie.a".into()));
    assert_eq!(e("{ method }"), Unknown(" method ".into()));
    assert_eq!(e("{path.}"), EmptyName("path.".into()));
    assert_eq!(e("{header.}"), EmptyName("header.".into()));
    assert_eq!(e("{body.}"), EmptyName("body.".into()));
    assert_eq!(e("{query.}"), EmptyName("query.".into()));
    assert!(matches!(e("{path.a-b}"), InvalidName { .. }));
    assert!(matches!(e("{body.a..b}"), InvalidName { .. }));
    assert!(matches!(e("{header.a b}"), InvalidName { .. }));
    assert!(matches!(e("{header.é}"), InvalidName { .. }));
    assert!(e("{nope}").to_string().contains("{path.NAME}"));
    assert!(e("{header.a:b}").to_string().contains("header name"));
}

// --- rendering ---

use bytes::Bytes;
use http::HeaderValue;

/// Owns what a `RequestView` borrows.
struct Req {
    method: Method,
    captures: Captures,
    query: Option<String>,
    headers: HeaderMap,
    body: BodyView,
}

impl Req {
    fn new() -> Req {
        Req {
            method: Method::POST,
            captures: Captures::default(),
            query: None,
            headers: HeaderMap::new(),
            body: BodyView::default(),
        }
    }

    fn body(mut self, text: &str) -> Req {
        self.body = BodyView::new(Bytes::copy_from_slice(text.as_bytes()));
        self
    }

    fn query(mut self, q: &str) -> Req {
        self.query = Some(q.to_owned());
        self
    }

    fn header(mut self, name: &'static str, value: &[u8]) -> Req {
        self.headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_bytes(value).unwrap(),
        );
        self
    }

    fn capture(mut self, name: &str, value: &str) -> Req {
        let mut pairs: Vec<(String, String)> = self
            .captures
            .iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        pairs.push((name.to_owned(), value.to_owned()));
        self.captures = pairs.into_iter().collect();
        self
    }

    fn render(&self, template: &str) -> Result<Option<String>, RenderError> {
        let view = RequestView {
            method: &self.method,
            route: "charge_invoice",
            captures: &self.captures,
            query: self.query.as_deref(),
            headers: &self.headers,
            body: &self.body,
            mcp: None,
        };
        Template::parse(template).unwrap().render(&view)
    }

    fn ok(&self, template: &str) -> Option<String> {
        self.render(template).unwrap()
    }
}

fn some(s: &str) -> Option<String> {
    Some(s.to_owned())
}

#[test]
fn renders_literals_path_method_route() {
    let r = Req::new().capture("invoice_id", "inv_1");
    assert_eq!(r.ok("charge:{path.invoice_id}"), some("charge:inv_1"));
    assert_eq!(r.ok("{method}/{route}"), some("POST/charge_invoice"));
    assert_eq!(r.ok("{{x}}"), some("{x}"));
    assert_eq!(r.ok(""), some(""));
    assert_eq!(r.ok("{path.other}"), None);
    assert_eq!(Req::new().capture("rest", "").ok("{path.rest}"), None);
}

#[test]
fn body_values_follow_the_spec_rules() {
    let r = Req::new().body(
        r#"{"s":"inv_1","n":42,"f":1.5,"t":true,"z":null,"e":"",
            "o":{"b":1,"a":[2,{"d":3,"c":4}]},"arr":[{"id":"x"},{"id":"y"}],
            "0":"zero-key","deep":{"a":{"b":{"0":{"c":"k"}}}}}"#,
    );
    assert_eq!(r.ok("{body.s}"), some("inv_1"));
    assert_eq!(r.ok("{body.n}"), some("42"));
    assert_eq!(r.ok("{body.f}"), some("1.5"));
    assert_eq!(r.ok("{body.t}"), some("true"));
    assert_eq!(r.ok("{body.o}"), some(r#"{"a":[2,{"c":4,"d":3}],"b":1}"#));
    assert_eq!(r.ok("{body.arr.1.id}"), some("y"));
    assert_eq!(r.ok("{body.0}"), some("zero-key"));
    assert_eq!(r.ok("{body.deep.a.b.0.c}"), some("k"));
    assert_eq!(r.ok("{body.o.a.1.c}"), some("4"));
    for missing in [
        "{body.z}",
        "{body.e}",
        "{body.nope}",
        "{body.arr.2.id}",
        "{body.arr.01.id}",
        "{body.arr.+1.id}",
        "{body.arr.-1.id}",
        "{body.arr.x}",
        "{body.s.0}",
        "{body.n.a}",
        "{body.arr.99999999999999999999999}",
        "x{body.s}{body.z}",
    ] {
        assert_eq!(r.ok(missing), None, "{missing}");
    }
}

#[test]
fn body_placeholders_need_a_json_body() {
    for body in ["", "a=1", "{\"a\":", "[[[[[["] {
        let r = Req::new().body(body);
        assert_eq!(
            r.render("{body.a}"),
            Err(RenderError::BodyNotJson),
            "{body}"
        );
        assert_eq!(r.render("{body_hash}"), Err(RenderError::BodyNotJson));
        // The error wins over another placeholder being missing.
        assert_eq!(
            r.render("{header.x}{body.a}"),
            Err(RenderError::BodyNotJson)
        );
        assert_eq!(r.ok("{method}"), some("POST"));
    }
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    let r = Req::new().body(&deep);
    assert_eq!(r.render("{body.0}"), Err(RenderError::BodyNotJson));
}

#[test]
fn body_hash_is_hex_sha256_of_canonical_json() {
    let a = Req::new()
        .body(r#"{"b":1,"a":[1,2]}"#)
        .ok("{body_hash}")
        .unwrap();
    let b = Req::new()
        .body("{ \"a\": [1, 2],\n \"b\": 1 }")
        .ok("{body_hash}");
    assert_eq!(Some(a.clone()), b);
    let expected = hex::encode(Sha256::digest(br#"{"a":[1,2],"b":1}"#));
    assert_eq!(a, expected);
    assert_eq!(a.len(), 64);
    assert!(a
        .bytes()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let c = Req::new().body(r#"{"b":2,"a":[1,2]}"#).ok("{body_hash}");
    assert_ne!(Some(a), c);
}

#[test]
fn rounded_numbers_never_share_a_key() {
    let a = Req::new().body(r#"{"acct":12345678901234567890123,"id":"x"}"#);
    let b = Req::new().body(r#"{"acct":12345678901234567890124,"id":"x"}"#);
    assert!(matches!(
        a.render("{body.acct}"),
        Err(RenderError::Invalid(_))
    ));
    let msg = a.render("{body.acct}").unwrap_err().to_string();
    assert!(msg.contains("body.acct") && msg.contains("string"), "{msg}");
    // Unaffected fields still render; the hash falls back to the raw bytes.
    assert_eq!(a.ok("{body.id}"), some("x"));
    assert_ne!(a.ok("{body_hash}"), b.ok("{body_hash}"));
}

#[test]
fn query_params() {
    let r = Req::new().query("a=1&b=x+y%21&a=2&c=&d&e%5B0%5D=v&bad=%FF");
    assert_eq!(r.ok("{query.a}"), some("1"));
    assert_eq!(r.ok("{query.b}"), some("x y!"));
    assert_eq!(r.ok("{query.e[0]}"), some("v"));
    assert_eq!(r.ok("{query.bad}"), some("\u{FFFD}"));
    for missing in ["{query.c}", "{query.d}", "{query.zz}"] {
        assert_eq!(r.ok(missing), None, "{missing}");
    }
    assert_eq!(Req::new().ok("{query.a}"), None);
    assert_eq!(Req::new().query("").ok("{query.a}"), None);
    assert_eq!(
        Req::new().query("%=1&%zz=2").ok("{query.%}:{query.%zz}"),
        some("1:2")
    );
}

#[test]
fn headers() {
    let r = Req::new()
        .header("x-task-id", b"task-1")
        .header("x-task-id", b"task-2")
        .header("x-step", b" 3 ")
        .header("x-empty", b"")
        .header("x-blank", b"   ")
        .header("x-utf8", "é".as_bytes())
        .header("x-obs", b"a\xffb")
        .header("x-space", b"a b");
    assert_eq!(r.ok("{header.x-task-id}:{header.X-Step}"), some("task-1:3"));
    assert_eq!(r.ok("{header.x-space}"), some("a b"));
    for missing in [
        "{header.x-empty}",
        "{header.x-blank}",
        "{header.x-utf8}",
        "{header.x-obs}",
        "{header.x-none}",
    ] {
        assert_eq!(r.ok(missing), None, "{missing}");
    }
}

#[test]
fn idempotency_key_header() {
    let key = |value: &[u8]| {
        Req::new()
            .header("idempotency-key", value)
            .render("{header.Idempotency-Key}")
    };
    assert_eq!(Req::new().ok("{header.idempotency-key}"), None);
    assert_eq!(key(b"abc-123"), Ok(some("abc-123")));
    assert_eq!(
        key(b"8e03978e-40d5-43e8-bc93-6894a57f9324"),
        Ok(some("8e03978e-40d5-43e8-bc93-6894a57f9324"))
    );
    assert_eq!(key(b"\"abc\""), Ok(some("abc")));
    assert_eq!(key(b" \"a b\" "), Ok(some("a b")));
    assert_eq!(key(br#""a\"b\\c""#), Ok(some(r#"a"b\c"#)));
    assert_eq!(key(b"a b"), Ok(some("a b")));
    for invalid in [
        &b""[..],
        b"  ",
        b"\"\"",
        b"\"abc",
        b"\"abc\"x",
        b"\"a\"b\"",
        br#""a\x""#,
        br#""a\"#,
        b"\"\t\"",
        b"\"\xc3\xa9\"",
        b"\xc3\xa9",
        b"a\tb",
    ] {
        let got = key(invalid);
        assert!(
            matches!(got, Err(RenderError::Invalid(_))),
            "{:?} → {got:?}",
            String::from_utf8_lossy(invalid)
        );
    }
    let msg = key(b"").unwrap_err().to_string();
    assert!(msg.contains("present but empty"), "{msg}");
    let msg = key(b"\"abc").unwrap_err().to_string();
    assert!(msg.contains("sf-string"), "{msg}");
}

#[test]
fn field_paths() {
    assert_eq!(
        FieldPath::parse("a.b.0").unwrap().segments(),
        ["a", "b", "0"]
    );
    assert_eq!(FieldPath::parse("a.b.0").unwrap().to_string(), "a.b.0");
    for bad in ["", ".", "a.", ".a", "a..b"] {
        assert_eq!(FieldPath::parse(bad), None, "{bad}");
    }
}
