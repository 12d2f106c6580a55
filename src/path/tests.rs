use super::*;

fn tpl(text: &str) -> PathTemplate {
    PathTemplate::parse(text).unwrap()
}

fn err(text: &str) -> String {
    PathTemplate::parse(text).unwrap_err()
}

#[test]
fn parses_literals_and_captures() {
    let t = tpl("/invoices/{invoice_id}/charge");
    assert_eq!(t.as_str(), "/invoices/{invoice_id}/charge");
    assert_eq!(t.capture_names().collect::<Vec<_>>(), ["invoice_id"]);
    let t = tpl("/a/{x}/b/{Y_2}/{rest*}");
    assert_eq!(t.capture_names().collect::<Vec<_>>(), ["x", "Y_2", "rest"]);
    assert_eq!(tpl("/").capture_names().count(), 0);
}

#[test]
fn rejects_bad_templates_with_clear_messages() {
    assert!(err("invoices").contains("must start with `/`"));
    assert!(err("").contains("must start with `/`"));
    assert!(err("/{id}/x/{id}").contains("appears twice"));
    assert!(err("/{id}/{id*}").contains("appears twice"));
    assert!(err("/{rest*}/x").contains("must be the last segment"));
    assert!(err("/{a-b}").contains("invalid capture name"));
    assert!(err("/{}").contains("invalid capture name"));
    assert!(err("/{*}").contains("invalid capture name"));
    assert!(err("/inv-{id}").contains("mixes literal text and a capture"));
    assert!(err("/{id}.json").contains("mixes literal text and a capture"));
    assert!(err("/{id").contains("mixes"));
    assert!(err("/a//b").contains("empty segment"));
    assert!(err("/a?b=1").contains("path only"));
    assert!(err("/a b").contains("path only"));
    assert!(err("/a%2Fb").contains("percent-encoding"));
    assert!(err("/a%FF").contains("percent-encoding"));
}

#[test]
fn matches_and_decodes_captures() {
    let t = tpl("/invoices/{invoice_id}/charge");
    let c = t.matches("/invoices/inv_1/charge").unwrap();
    assert_eq!(c.get("invoice_id"), Some("inv_1"));
    assert_eq!(c.len(), 1);
    let c = t.matches("/invoices/a%20b%2Fc/charge").unwrap();
    assert_eq!(c.get("invoice_id"), Some("a b/c"));
    assert_eq!(c.get("other"), None);
}

#[test]
fn misses() {
    let t = tpl("/invoices/{invoice_id}/charge");
    for path in [
        "/invoices/1",
        "/invoices/1/charge/x",
        "/invoices//charge",
        "/invoices/1/Charge",
        "invoices/1/charge",
        "",
        "*",
        "/",
    ] {
        assert_eq!(t.matches(path), None, "{path}");
    }
}

#[test]
fn literal_segments_compare_decoded() {
    let t = tpl("/invoices/{id}/charge");
    assert!(t.matches("/invoices/1/%63harge").is_some());
    assert!(t.matches("/%69nvoices/1/charge").is_some());
    let t = tpl("/caf%C3%A9/x%20y");
    assert!(t.matches("/caf%C3%A9/x%20y").is_some());
    assert!(t.matches("/café/x%20y").is_some());
}

#[test]
fn trailing_slash_repeated_slashes_and_dot_segments_are_not_significant() {
    assert!(tpl("/emails").matches("/emails").is_some());
    assert!(tpl("/emails").matches("/emails/").is_some());
    assert!(tpl("/emails/").matches("/emails/").is_some());
    assert!(tpl("/emails/").matches("/emails").is_some());
    assert!(tpl("/").matches("/").is_some());
    assert!(tpl("/").matches("//").is_some());
    assert!(tpl("/").matches("/x").is_none());
    let t = tpl("/invoices/{id}/charge");
    for path in [
        "/invoices/X/charge/",
        "//invoices/X/charge",
        "/invoices//X///charge//",
        "/./invoices/X/charge",
        "/invoices/./X/%2e/charge/.",
        "/%69nvoices/X/ch%61rge",
    ] {
        let c = t.matches(path).unwrap_or_else(|| panic!("{path}"));
        assert_eq!(c.get("id"), Some("X"), "{path}");
    }
    for path in [
        "/invoices/X/../charge",
        "/invoices/X/charge/x",
        "/Invoices/X/charge",
    ] {
        assert!(t.matches(path).is_none(), "{path}");
    }
}

#[test]
fn path_case_insensitive_compares_literals_without_case() {
    let t = tpl("/invoices/{id}/charge").case_insensitive();
    let c = t.matches("/INVOICES/Ab/Ch%41rge").unwrap();
    assert_eq!(c.get("id"), Some("Ab"), "captures keep their case");
    assert!(t.matches("/invoices/Ab/chargex").is_none());
    assert!(t.matches("/invoices/Ab/charg").is_none());
}

#[test]
fn normalised_is_borrowed_when_normal_and_reads_as_matching_does() {
    for path in ["/", "/invoices/X/charge", "/a/b?x=1//./", "/a.b/c.d"] {
        assert!(
            matches!(normalised(path, false), Cow::Borrowed(_)),
            "{path}"
        );
    }
    for (path, want) in [
        ("/invoices/X/charge/", "/invoices/X/charge"),
        ("//invoices//X/charge?q=/a/", "/invoices/X/charge?q=/a/"),
        ("/./invoices/X/%2E/charge", "/invoices/X/charge"),
        ("/%69nvoices/%7e/%2fx%c3%a9", "/invoices/~/%2Fx%C3%A9"),
        ("//", "/"),
        ("/caf\u{e9}/", "/caf\u{e9}"),
    ] {
        assert_eq!(normalised(path, false), want, "{path}");
    }
    assert_eq!(normalised("/Invoices/%41", true), "/invoices/a");
    assert!(matches!(normalised("/invoices", true), Cow::Borrowed(_)));
}

#[test]
fn wildcard_captures_the_rest() {
    let all = tpl("/{path*}");
    assert_eq!(all.matches("/").unwrap().get("path"), Some(""));
    assert_eq!(all.matches("/a").unwrap().get("path"), Some("a"));
    assert_eq!(all.matches("/a/b/").unwrap().get("path"), Some("a/b/"));
    assert_eq!(all.matches("/a%2Fb").unwrap().get("path"), Some("a/b"));
    assert!(all.matches("").is_none());

    let files = tpl("/files/{id}/{rest*}");
    let c = files.matches("/files/7/x/y").unwrap();
    assert_eq!(c.iter().collect::<Vec<_>>(), [("id", "7"), ("rest", "x/y")]);
    assert_eq!(files.matches("/files/7").unwrap().get("rest"), Some(""));
    assert_eq!(files.matches("/files/7/").unwrap().get("rest"), Some(""));
    assert!(files.matches("/files").is_none());
    assert!(files.matches("/other/7/x").is_none());
}

#[test]
fn query_is_ignored_and_bad_encoding_never_panics() {
    let t = tpl("/a/{x}");
    assert_eq!(t.matches("/a/1?x=2").unwrap().get("x"), Some("1"));
    assert_eq!(t.matches("/a/%FF").unwrap().get("x"), Some("\u{FFFD}"));
    assert_eq!(t.matches("/a/%").unwrap().get("x"), Some("%"));
    assert_eq!(t.matches("/a/%zz").unwrap().get("x"), Some("%zz"));
    assert!(t.matches("/a/é").is_some());
}

#[test]
fn captures_from_iter() {
    let c: Captures = [("a", "1"), ("b", "2")].into_iter().collect();
    assert_eq!(c.get("b"), Some("2"));
    assert!(!c.is_empty());
    assert!(Captures::default().is_empty());
}
