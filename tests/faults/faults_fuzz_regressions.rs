//! Inputs found by the fuzz targets in `fuzz/` (see docs/reliability.md, "Fuzzing"),
//! kept as regression tests in the default build.

use bytes::Bytes;
use idem::body::BodyView;

/// fuzz target `canonical`, input `[290e229]`: serde_json's default float parser is not
/// correctly rounded, so canonical JSON was not a fixed point: `290e229` became
/// `2.9e231`, which parsed back as `2.9000000000000004e231` — and a caller that
/// re-serialised its arguments (`2.9e+231`) got a different fingerprint and a different
/// `{body_hash}` key for the same request. Fixed by serde_json's `float_roundtrip`.
#[test]
fn canonical_json_of_a_large_float_is_a_fixed_point() {
    for text in [
        "[290e229]",
        "[2.9e231]",
        "[2.9e+231]",
        "{\"a\":29e230}",
        "[0.1e-300]",
        "[1.7976931348623157e308]",
    ] {
        let body = BodyView::new(Bytes::from(text));
        let canonical = body
            .canonical()
            .unwrap_or_else(|| panic!("{text}: exact, so canonical"))
            .to_vec();
        let value: serde_json::Value = serde_json::from_slice(&canonical).unwrap();
        assert_eq!(Some(&value), body.json(), "{text}: same value");
        let again = BodyView::new(Bytes::from(canonical.clone()));
        assert_eq!(
            again.canonical(),
            Some(&canonical[..]),
            "{text}: idempotent"
        );
    }
    // Same number, three spellings: one identity.
    let ids: Vec<Vec<u8>> = ["[290e229]", "[2.9e231]", "[2.9e+231]"]
        .iter()
        .map(|t| BodyView::new(Bytes::from(*t)).identity_bytes().1.to_vec())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
}

/// Deep nesting in the places the fuzzers reach slowly: a config nested 100 000 deep is
/// an error, not a stack overflow; so is a JSON body or a stored record holding one.
#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for doc in [
        format!(
            "upstream:\n  url: http://127.0.0.1:1\nroutes: {}",
            "[".repeat(100_000)
        ),
        format!(
            "upstream:\n  url: http://127.0.0.1:1\nroutes:\n{}",
            (0..2_000)
                .map(|i| format!("{}- ", " ".repeat(i * 2)))
                .collect::<Vec<_>>()
                .join("\n")
        ),
        format!(
            "upstream:\n  url: http://127.0.0.1:1\nx: {}",
            "{a: ".repeat(50_000)
        ),
    ] {
        assert!(idem::config::Config::from_yaml_str(&doc, None).is_err());
    }
    let body = BodyView::new(Bytes::from("[".repeat(200_000)));
    assert!(body.json().is_none());
    assert!(idem::store::record::decode(
        format!("P{}\n{}\n", "0".repeat(32), "[".repeat(100_000)).as_bytes()
    )
    .is_err());
}
