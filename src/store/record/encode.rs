//! The write side of the record layout described in `record/mod.rs`.
//!
//! The metadata line is written field by field rather than through `serde_json`'s
//! serializer: every record a fresh request stores goes through here twice (reserve,
//! complete), and serde's string escaping inspects one byte at a time — the hex digests
//! and field names alone made it the largest single cost of encoding. Strings that need
//! no escaping (all of ours but odd keys and header values) are copied as they are;
//! the others go through `serde_json`, so the output is exactly the compact JSON that
//! `serde_json` writes for the same fields, and `decode::decode` reads it back.

use std::io::Write;

use bytes::Bytes;

use super::{Record, RecordState};

/// Serialises a record into `out` (a `Vec`, or a Redis command's argument buffer).
pub fn encode_into(record: &Record, out: &mut impl Write) {
    let (status, headers, body) = match (&record.response, &record.sealed) {
        (Some(r), _) => (Some(r.status), r.headers.as_slice(), r.body.as_ref()),
        // Sealed: the status and headers are inside the sealed bytes, which take the
        // body's place; `status: null` keeps releases before sealing from replaying it.
        (None, Some(sealed)) => (None, &[][..], Some(&sealed.bytes)),
        (None, None) => (None, &[][..], None),
    };
    let state = match record.state {
        RecordState::InProgress => b'P',
        RecordState::Completed => b'C',
    };
    // Writing to memory cannot fail; integers and strings always serialise.
    let _ = out.write_all(&[state]);
    let _ = out.write_all(&record.token.hex());
    let _ = out.write_all(b"\n{\"route\":");
    string(out, &record.route);
    let _ = out.write_all(b",\"scope\":");
    string(out, &record.scope);
    let _ = out.write_all(b",\"key\":");
    string(out, &record.key);
    let _ = out.write_all(b",\"fingerprint\":");
    hex32(out, &record.fingerprint);
    let _ = out.write_all(b",\"credentials\":");
    hex32(out, &record.credentials);
    let _ = out.write_all(b",\"attempt\":");
    let _ = serde_json::to_writer(&mut *out, &record.attempt);
    let _ = out.write_all(b",\"created_at_ms\":");
    let _ = serde_json::to_writer(&mut *out, &record.created_at_ms);
    let _ = out.write_all(b",\"expires_at_ms\":");
    let _ = serde_json::to_writer(&mut *out, &record.expires_at_ms);
    let _ = out.write_all(b",\"status\":");
    let _ = serde_json::to_writer(&mut *out, &status);
    let _ = out.write_all(b",\"headers\":[");
    for (i, (name, value)) in headers.iter().enumerate() {
        let _ = out.write_all(if i == 0 { b"[" } else { b",[" });
        string(out, name.as_str());
        let _ = out.write_all(b",");
        latin1(out, value.as_bytes());
        let _ = out.write_all(b"]");
    }
    let _ = out.write_all(b"],\"body_stored\":");
    let _ = out.write_all(if body.is_some() { b"true" } else { b"false" });
    if let Some(link) = &record.trace {
        // Optional and last: records written before it existed decode without it.
        let _ = out.write_all(b",\"trace\":\"");
        let _ = out.write_all(&link.hex());
        let _ = out.write_all(b"\"");
    }
    // Optional too, for the same reason; written by every record of this version.
    let _ = out.write_all(b",\"sent_at_ms\":");
    let _ = serde_json::to_writer(&mut *out, &record.sent_at_ms);
    if let Some(settled) = record.settled {
        let _ = out.write_all(b",\"settled\":\"");
        let _ = out.write_all(settled.as_str().as_bytes());
        let _ = out.write_all(b"\"");
    }
    if let Some(sealed) = &record.sealed {
        let _ = out.write_all(b",\"sealed\":");
        string(out, &sealed.key_id);
        // Absent in format 1 (earlier releases, which ignore the field when reading).
        if sealed.format != 1 {
            let _ = out.write_all(b",\"seal_format\":");
            let _ = serde_json::to_writer(&mut *out, &sealed.format);
        }
    }
    let _ = out.write_all(b"}\n");
    let _ = out.write_all(body.map_or(&[][..], |b| &b[..]));
}

/// Serialises a record into the layout above.
pub fn encode(record: &Record) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_size_hint(record));
    encode_into(record, &mut out);
    out
}

/// About the encoded size of `record` (at least it, unless keys or header values need
/// escaping), so buffers can be sized once rather than grown (and copied) while
/// encoding.
pub fn encoded_size_hint(record: &Record) -> usize {
    let response = record.response.as_ref();
    let body = response.and_then(|r| r.body.as_ref()).map_or(0, Bytes::len)
        + record
            .sealed
            .as_ref()
            .map_or(0, |s| s.bytes.len() + s.key_id.len());
    let headers = response.map_or(0, |r| {
        r.headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 8)
            .sum()
    });
    let text = record.route.len() + record.scope.len() + record.key.len();
    448 + text + headers + body
}

/// A JSON string: copied between quotes when nothing in it needs escaping (quote,
/// backslash, control characters), else escaped by `serde_json`.
fn string(out: &mut impl Write, s: &str) {
    if !needs_escaping(s.as_bytes()) {
        quoted(out, s.as_bytes());
    } else {
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// Whether a JSON string of these bytes needs escapes. A fold without an early exit, so
/// the compiler checks 16 or 32 bytes at a time: the strings are short and almost never
/// need any.
fn needs_escaping(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |seen, &b| {
        seen | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

fn quoted(out: &mut impl Write, bytes: &[u8]) {
    let _ = out.write_all(b"\"");
    let _ = out.write_all(bytes);
    let _ = out.write_all(b"\"");
}

/// A 32-byte digest as a quoted lowercase hex string (never needs escaping).
fn hex32(out: &mut impl Write, digest: &[u8; 32]) {
    let mut buf = [b'"'; 66];
    // 64 bytes of room for 32 bytes of input: cannot fail.
    crate::fast_hex::encode_into(digest, &mut buf[1..65]);
    let _ = out.write_all(&buf);
}

/// A header value as a latin-1 string: each byte becomes the char with the same code
/// point, so values that are not UTF-8 survive the JSON round trip. ASCII (the usual
/// case) is written in place.
fn latin1(out: &mut impl Write, bytes: &[u8]) {
    if !bytes.is_ascii() {
        let text: String = bytes.iter().map(|&b| char::from(b)).collect();
        string(out, &text);
    } else if needs_escaping(bytes) {
        string(out, std::str::from_utf8(bytes).unwrap_or_default());
    } else {
        // ASCII is UTF-8 already: no second validation.
        quoted(out, bytes);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::{HeaderName, HeaderValue};
    use serde_json::{json, Value};

    use super::super::decode::decode;
    use super::*;
    use crate::store::StoredResponse;

    /// The metadata line, parsed.
    fn meta_of(bytes: &[u8]) -> Value {
        let line = bytes[34..].split(|&b| b == b'\n').next().unwrap();
        serde_json::from_slice(line).unwrap()
    }

    /// Keys and header values that need every kind of escaping (and some that look
    /// like they might) come out as the JSON serde builds for the same fields, on one
    /// line, and decode to the same record.
    #[test]
    fn escaping_matches_serde_json() {
        let awkward = [
            "plain",
            "",
            "quote\"in",
            "back\\slash",
            "new\nline\r\ttab",
            "\u{0}\u{1f}\u{7f}",
            "é ünïcödé 🚀",
            "</script>",
            "\\u0041",
        ];
        for key in awkward {
            let value = HeaderValue::from_bytes(b"caf\xe9 \"q\" \\ \x80").unwrap();
            let header = (HeaderName::from_static("x-odd"), value);
            let record = Record::in_progress(key, key, key, [0xab; 32], [0; 32], Duration::ZERO)
                .completed(
                    StoredResponse {
                        status: 201,
                        headers: vec![header],
                        body: Some(Bytes::from_static(b"\n")),
                    },
                    Duration::from_secs(1),
                );
            let bytes = encode(&record);
            let expected = json!({
                "route": key, "scope": key, "key": key,
                "fingerprint": "ab".repeat(32), "credentials": "00".repeat(32),
                "attempt": 1, "created_at_ms": record.created_at_ms,
                "expires_at_ms": record.expires_at_ms, "status": 201,
                "headers": [["x-odd", "caf\u{e9} \"q\" \\ \u{80}"]], "body_stored": true,
                "sent_at_ms": record.sent_at_ms,
            });
            assert_eq!(meta_of(&bytes), expected, "{key:?}");
            assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 3, "{key:?}");
            assert_eq!(decode(&bytes).unwrap(), record, "{key:?}");
        }
    }

    #[test]
    fn in_progress_has_null_status_and_no_headers() {
        let record = Record::in_progress("r", "", "k", [1; 32], [2; 32], Duration::ZERO);
        let meta = meta_of(&encode(&record));
        assert_eq!(meta["status"], Value::Null);
        assert_eq!(meta["headers"], json!([]));
        assert_eq!(meta["body_stored"], json!(false));
    }
}
