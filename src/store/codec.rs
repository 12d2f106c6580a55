//! Wire encoding of a [`Record`], shared by every backend that stores bytes.
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

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use super::{Record, RecordState, StoreError, StoredResponse, Token};

/// Everything but the state, the token and the body.
#[derive(Serialize, Deserialize)]
struct Meta {
    route: String,
    scope: String,
    key: String,
    fingerprint: String,
    credentials: String,
    attempt: u32,
    created_at_ms: u64,
    expires_at_ms: u64,
    status: Option<u16>,
    headers: Vec<(String, String)>,
    body_stored: bool,
}

/// Serialises a record into the layout above.
pub fn encode(record: &Record) -> Vec<u8> {
    let (status, headers, body) = match &record.response {
        Some(r) => (Some(r.status), r.headers.as_slice(), r.body.as_ref()),
        None => (None, &[][..], None),
    };
    let meta = Meta {
        route: record.route.clone(),
        scope: record.scope.clone(),
        key: record.key.clone(),
        fingerprint: hex::encode(record.fingerprint),
        credentials: hex::encode(record.credentials),
        attempt: record.attempt,
        created_at_ms: record.created_at_ms,
        expires_at_ms: record.expires_at_ms,
        status,
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), latin1(v.as_bytes())))
            .collect(),
        body_stored: body.is_some(),
    };
    // Serialising plain strings and integers cannot fail.
    let json = serde_json::to_vec(&meta).unwrap_or_default();
    let body = body.map_or(&[][..], |b| &b[..]);
    let mut out = Vec::with_capacity(35 + json.len() + body.len());
    out.push(match record.state {
        RecordState::InProgress => b'P',
        RecordState::Completed => b'C',
    });
    out.extend_from_slice(record.token.to_string().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&json);
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// Parses bytes written by [`encode`]. Anything else is [`StoreError::Corrupt`], never
/// a panic: the bytes come from a shared store that other software can write to.
pub fn decode(bytes: &[u8]) -> Result<Record, StoreError> {
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
    let split = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| corrupt("missing metadata separator"))?;
    let meta: Meta = serde_json::from_slice(&rest[..split])
        .map_err(|e| corrupt(&format!("bad metadata: {e}")))?;
    let body = &rest[split + 1..];

    let response = match (state, meta.status) {
        (RecordState::InProgress, _) => None,
        (RecordState::Completed, None) => return Err(corrupt("completed without status")),
        (RecordState::Completed, Some(status)) => Some(StoredResponse {
            status,
            headers: meta
                .headers
                .iter()
                .map(|(n, v)| header(n, v))
                .collect::<Result<_, _>>()?,
            body: meta.body_stored.then(|| Bytes::copy_from_slice(body)),
        }),
    };
    Ok(Record {
        state,
        token,
        route: meta.route,
        scope: meta.scope,
        key: meta.key,
        fingerprint: digest(&meta.fingerprint)?,
        credentials: digest(&meta.credentials)?,
        attempt: meta.attempt,
        created_at_ms: meta.created_at_ms,
        expires_at_ms: meta.expires_at_ms,
        response,
    })
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), StoreError> {
    let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| corrupt("bad header name"))?;
    let bytes = value
        .chars()
        .map(|c| u8::try_from(u32::from(c)).map_err(|_| corrupt("header value not latin-1")))
        .collect::<Result<Vec<u8>, _>>()?;
    let value = HeaderValue::from_bytes(&bytes).map_err(|_| corrupt("bad header value"))?;
    Ok((name, value))
}

fn digest(hex: &str) -> Result<[u8; 32], StoreError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex, &mut out).map_err(|_| corrupt("bad digest"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn completed(body: Option<&'static [u8]>) -> Record {
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
        assert_eq!(decode(&bytes).unwrap(), r);
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
