//! Wire layout of a [`Record`], shared by every backend that stores bytes, and its
//! decoder (the writer is `encode.rs`).
//!
//! Layout:
//! ```text
//! 'P' | 'C'                  state: in progress | completed
//! 32 lowercase hex chars     fencing token  (bytes 2..=33 in Lua's 1-based string.sub)
//! '\n'
//! compact JSON metadata      one line: serde_json escapes every '\n' inside strings
//! '\n'
//! raw body bytes             no base64: a stored 1 MiB response stays 1 MiB
//! ```
//! The fixed prefix lets the ownership scripts compare tokens with one
//! `string.sub(current, 2, 33)` without parsing JSON in Lua.
//!
//! Header values may be any bytes (`HeaderValue` is not necessarily UTF-8), so they
//! are stored as latin-1 strings: each byte becomes the char with the same code point,
//! which JSON carries losslessly.

use super::meta_line::Meta;
use super::TraceLink;
use super::{Record, RecordState, Settled, StoredResponse, Token};
use crate::store::seal::Sealed;
use crate::store::StoreError;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};

/// Parses bytes written by [`encode`](super::encode::encode). Anything else is
/// [`StoreError::Corrupt`], never a panic: the bytes come from a shared store that
/// other software can write to. The stored body is copied out of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Record, StoreError> {
    decode_parts(bytes, Bytes::copy_from_slice)
}

/// [`decode`] of a reply the caller owns: the stored body is a view into `bytes`, not a
/// copy (a replayed 1 MiB response is not copied once more on its way out).
pub fn decode_owned(bytes: Bytes) -> Result<Record, StoreError> {
    decode_parts(&bytes, |body| bytes.slice_ref(body))
}

/// The decoder; `body_of` turns the body's bytes (a subslice of `bytes`) into `Bytes`.
fn decode_parts(bytes: &[u8], body_of: impl Fn(&[u8]) -> Bytes) -> Result<Record, StoreError> {
    let state = match bytes.first() {
        Some(b'P') => RecordState::InProgress,
        Some(b'C') => RecordState::Completed,
        _ => return Err(corrupt("unknown state byte")),
    };
    let token = bytes
        .get(1..33)
        .and_then(Token::from_hex)
        .ok_or_else(|| corrupt("bad token"))?;
    if bytes.get(33) != Some(&b'\n') {
        return Err(corrupt("missing header separator"));
    }
    let rest = &bytes[34..];
    let split = memchr::memchr(b'\n', rest).ok_or_else(|| corrupt("missing metadata separator"))?;
    let meta = Meta::parse(&rest[..split]).map_err(|e| corrupt(&format!("bad metadata: {e}")))?;
    let body = &rest[split + 1..];

    // Sealed in any phase: an in-progress record's sealed bytes hold its key and scope
    // (format 2; releases before it sealed completed records only, and read past the
    // field on one in progress).
    let sealed = meta.sealed.as_deref().map(|key_id| {
        Box::new(Sealed {
            key_id: key_id.to_owned(),
            bytes: body_of(body),
            format: meta.seal_format.unwrap_or(1),
        })
    });
    let response = match (state, meta.status) {
        (RecordState::InProgress, _) => None,
        (RecordState::Completed, None) if sealed.is_some() => None,
        (RecordState::Completed, None) => return Err(corrupt("completed without status")),
        (RecordState::Completed, Some(status)) => Some(StoredResponse {
            status,
            headers: meta
                .headers
                .iter()
                .map(|(n, v)| header(n, v))
                .collect::<Result<_, _>>()?,
            body: meta.body_stored.then(|| body_of(body)),
        }),
    };
    Ok(Record {
        state,
        token,
        route: meta.route.into_owned(),
        scope: meta.scope.into_owned(),
        key: meta.key.into_owned(),
        fingerprint: meta.fingerprint.0,
        credentials: meta.credentials.0,
        attempt: meta.attempt,
        created_at_ms: meta.created_at_ms,
        expires_at_ms: meta.expires_at_ms,
        response,
        // Informational: a damaged link is dropped rather than failing the replay.
        trace: meta
            .trace
            .as_deref()
            .and_then(TraceLink::parse)
            .map(Box::new),
        sent_at_ms: meta.sent_at_ms.unwrap_or(meta.created_at_ms),
        settled: match meta.settled.as_deref() {
            None => None,
            Some(name) => {
                Some(Settled::from_name(name).ok_or_else(|| corrupt("unknown settlement"))?)
            }
        },
        sealed,
        stamp: None,
    })
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), StoreError> {
    let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| corrupt("bad header name"))?;
    let value = if value.is_ascii() {
        HeaderValue::from_bytes(value.as_bytes())
    } else {
        let bytes = value
            .chars()
            .map(|c| u8::try_from(u32::from(c)).map_err(|_| corrupt("header value not latin-1")))
            .collect::<Result<Vec<u8>, _>>()?;
        HeaderValue::from_bytes(&bytes)
    };
    let value = value.map_err(|_| corrupt("bad header value"))?;
    Ok((name, value))
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::super::encode::{encode, encode_into, encoded_size_hint};
    use super::*;

    /// A completed record with a key that needs escaping and a non-UTF-8 header value.
    pub(in crate::store) fn completed(body: Option<&'static [u8]>) -> Record {
        let r = Record::in_progress("charge", "t1", "inv\n1", [7; 32], [9; 32], Duration::ZERO);
        let headers = vec![
            (
                HeaderName::from_static("content-type"),
                HeaderValue::from_static("application/json"),
            ),
            (
                HeaderName::from_static("x-raw"),
                HeaderValue::from_bytes(b"caf\xe9 \xff").unwrap(),
            ),
        ];
        let body = body.map(Bytes::from_static);
        r.completed(
            StoredResponse {
                status: 402,
                headers,
                body,
            },
            Duration::from_secs(60),
        )
    }

    #[test]
    fn in_progress_round_trips() {
        let r = Record::in_progress("r", "", "k", [1; 32], [0; 32], Duration::from_secs(30));
        let bytes = encode(&r);
        assert_eq!(bytes[0], b'P');
        assert_eq!(&bytes[1..33], r.token.to_string().as_bytes());
        // The stamp is a write instruction, not stored.
        assert_eq!(decode(&bytes).unwrap(), Record { stamp: None, ..r });
    }

    #[test]
    fn completed_with_binary_body_and_non_utf8_header_round_trips() {
        let r = completed(Some(b"\x00\n\xff{\"json\":\n}\r\n"));
        let bytes = encode(&r);
        assert_eq!(bytes[0], b'C');
        assert!(bytes.ends_with(b"\x00\n\xff{\"json\":\n}\r\n"));
        assert_eq!(decode(&bytes).unwrap(), r);
    }

    #[test]
    fn size_hint_covers_the_encoding() {
        let long = "k".repeat(300);
        let records = [
            Record::in_progress("r", "", "k", [1; 32], [0; 32], Duration::from_secs(30)),
            Record::in_progress("route", "s", &long, [1; 32], [2; 32], Duration::MAX),
            completed(None),
            completed(Some(&[7u8; 5000])),
        ];
        for r in &records {
            assert!(encode(r).len() <= encoded_size_hint(r), "{r:?}");
        }
    }

    /// The encoder writes exactly what the owned `Meta` layout always did.
    #[test]
    fn encoding_is_stable() {
        let r = completed(Some(b"{}"));
        let bytes = encode(&r);
        let text = String::from_utf8_lossy(&bytes[34..]).into_owned();
        let meta_line = text.split('\n').next().unwrap();
        let expected = format!(
            "{{\"route\":\"charge\",\"scope\":\"t1\",\"key\":\"inv\\n1\",\"fingerprint\":\"{}\",\
             \"credentials\":\"{}\",\"attempt\":1,\"created_at_ms\":{},\"expires_at_ms\":{},\
             \"status\":402,\"headers\":[[\"content-type\",\"application/json\"],\
             [\"x-raw\",\"caf\u{e9} \u{ff}\"]],\"body_stored\":true,\"sent_at_ms\":{}}}",
            "07".repeat(32),
            "09".repeat(32),
            r.created_at_ms,
            r.expires_at_ms,
            r.sent_at_ms
        );
        assert_eq!(meta_line, expected);
        let mut streamed = Vec::new();
        encode_into(&r, &mut streamed);
        assert_eq!(streamed, bytes);
    }

    /// The trace link survives the codec; records written before it (no field) and
    /// with a damaged one decode without it.
    #[test]
    fn trace_link_round_trips_and_is_optional() {
        let mut r = completed(Some(b"{}"));
        r.trace = Some(Box::new(TraceLink {
            trace_id: [0x4b; 16],
            span_id: [0x0c; 8],
        }));
        let bytes = encode(&r);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let field = format!(",\"trace\":\"{}-{}\"", "4b".repeat(16), "0c".repeat(8));
        assert!(
            text.contains(&format!("\"body_stored\":true{field},\"sent_at_ms\":")),
            "{text}"
        );
        assert_eq!(decode(&bytes).unwrap(), r);
        assert!(bytes.len() <= encoded_size_hint(&r));
        let old = text.replace(&field, "");
        assert_eq!(decode(old.as_bytes()).unwrap().trace, None);
        let damaged = text.replace("-0c0c", "-zz0c");
        assert_eq!(decode(damaged.as_bytes()).unwrap().trace, None);
    }

    #[test]
    fn body_not_stored_is_distinct_from_empty_body() {
        let none = completed(None);
        let empty = completed(Some(b""));
        assert_eq!(decode(&encode(&none)).unwrap().response.unwrap().body, None);
        let got = decode(&encode(&empty)).unwrap().response.unwrap().body;
        assert_eq!(got, Some(Bytes::new()));
    }

    #[test]
    fn garbage_is_corrupt_never_a_panic() {
        let good = encode(&completed(Some(b"x")));
        let mut cases: Vec<Vec<u8>> = vec![
            vec![],
            b"P".to_vec(),
            b"X0123456789abcdef0123456789abcdef\n{}\n".to_vec(),
            b"P0123456789ABCDEF0123456789abcdef\n{}\n".to_vec(),
            b"P0123456789abcdef0123456789abcdef{}\n".to_vec(),
            b"P0123456789abcdef0123456789abcdef\n{}".to_vec(),
            b"P0123456789abcdef0123456789abcdef\n{}\n".to_vec(),
            b"P0123456789abcdef0123456789abcdef\nnot json\n".to_vec(),
            "P0123456789abcdef0123456789abcdé\n{}\n".as_bytes().to_vec(),
        ];
        // Every truncation of a valid record, and a completed record without status.
        cases.extend((0..good.len() - 1).map(|n| good[..n].to_vec()));
        let text = String::from_utf8_lossy(&good).replace("\"status\":402", "\"status\":null");
        cases.push(text.into_bytes());
        let text = String::from_utf8_lossy(&good).replace("x-raw", "bad name");
        cases.push(text.into_bytes());
        for case in cases {
            assert!(
                matches!(decode(&case), Err(StoreError::Corrupt(_))),
                "{:?}",
                String::from_utf8_lossy(&case)
            );
        }
    }
}
