//! Canonical JSON: object keys sorted, no insignificant whitespace, so agents that
//! re-serialise the same arguments produce the same bytes.
//!
//! Keys are sorted here explicitly (by their UTF-8 bytes) rather than relying on
//! `serde_json::Map` being a `BTreeMap`: any crate in the build enabling serde_json's
//! `preserve_order` feature would silently turn it into an insertion-ordered map.
//! Strings and numbers use serde_json's own compact formatting. This is idem's internal
//! canonical form (stable across versions of idem), not RFC 8785 JCS.

use serde_json::Value;

/// Canonical JSON bytes of `value`.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write(value, &mut out);
    out
}

/// Canonical JSON text of `value`.
pub fn to_string(value: &Value) -> String {
    // Only serde_json's UTF-8 output and ASCII punctuation are ever written.
    String::from_utf8(to_vec(value)).unwrap_or_default()
}

/// Append canonical JSON of `value` to `out`. Recursion depth is bounded by the value
/// itself; values parsed by serde_json are at most 128 levels deep.
pub fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // A `&String` serialises as a JSON string; writing to a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, key);
                out.push(b':');
                write(item, out);
            }
            out.push(b'}');
        }
        leaf => write_leaf(leaf, out),
    }
}

/// null, bool, number, string: serde_json's compact form. Writing into a `Vec` cannot
/// fail, and these variants have no map keys that could.
fn write_leaf(value: &Value, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        to_string(&serde_json::from_str(text).unwrap())
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        assert_eq!(canon(r#"{"b":1,"a":2}"#), canon("{ \"a\": 2,\n \"b\": 1 }"));
        assert_eq!(canon(r#"{"b":1,"a":2}"#), r#"{"a":2,"b":1}"#);
        assert_eq!(
            canon(r#"{"z":{"y":[{"d":1,"c":2}],"x":null},"a":true}"#),
            canon(r#"{ "a" : true , "z" : { "x" : null , "y" : [ { "c" : 2 , "d" : 1 } ] } }"#),
        );
        assert_eq!(
            canon(r#"{"z":{"y":[{"d":1,"c":2}],"x":null},"a":true}"#),
            r#"{"a":true,"z":{"x":null,"y":[{"c":2,"d":1}]}}"#
        );
    }

    #[test]
    fn array_order_and_values_matter() {
        assert_ne!(canon("[1,2]"), canon("[2,1]"));
        assert_ne!(canon(r#"{"a":1}"#), canon(r#"{"a":"1"}"#));
        assert_ne!(canon(r#"{"amount":100}"#), canon(r#"{"amount":101}"#));
    }

    #[test]
    fn leaves_use_compact_json() {
        assert_eq!(canon(r#""a\"b\\c\n""#), r#""a\"b\\c\n""#);
        assert_eq!(canon(r#""\u00e9""#), "\"é\"");
        assert_eq!(canon("1.50"), "1.5");
        assert_eq!(canon("-0"), "-0.0");
        assert_eq!(canon("[]"), "[]");
        assert_eq!(canon("{}"), "{}");
        assert_eq!(canon("null"), "null");
        assert_eq!(canon(r#"{"é":1,"e":2,"Z":3}"#), r#"{"Z":3,"e":2,"é":1}"#);
    }

    /// Spellings of one value that JSON itself keeps apart stay apart (issue 46, "also
    /// found, held"): `1` and `1.0`, a precomposed `é` and `e` + combining accent (NFC
    /// and NFD). Their fingerprints differ, so a repeat that changed the spelling is
    /// 422 `idempotency_key_reused`, never the replay of a request the upstream may read
    /// differently; merging them would be the unsafe direction.
    #[test]
    fn spellings_json_keeps_apart_are_not_merged() {
        assert_ne!(canon(r#"{"amount":1}"#), canon(r#"{"amount":1.0}"#));
        assert_ne!(canon(r#""caf\u00e9""#), canon(r#""cafe\u0301""#));
        assert_ne!(canon(r#"{"caf\u00e9":1}"#), canon(r#"{"cafe\u0301":1}"#));
    }

    #[test]
    fn output_reparses_to_the_same_value() {
        let text = r#"{"k":[1,-2.5,"s",{"b":null,"a":[[]]}],"é":"\u0001"}"#;
        let value: Value = serde_json::from_str(text).unwrap();
        let again: Value = serde_json::from_slice(&to_vec(&value)).unwrap();
        assert_eq!(value, again);
    }
}
