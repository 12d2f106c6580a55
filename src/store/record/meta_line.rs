//! The metadata line of a stored record (see `record/mod.rs`), read back.
//!
//! Every replay decodes a record, so the line is first scanned in the exact shape
//! `encode.rs` writes — fixed field order, no whitespace, strings without escapes —
//! which takes a fraction of what `serde_json`'s general deserializer spends matching
//! field names and visiting each token. Anything else (an escaped string, a record
//! written by some future version with more fields, garbage) goes to `serde_json`,
//! which decides. Where the scan accepts a line, `serde_json` reads the same values
//! from it (tested below on mutated lines).

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};

/// Everything but the state, the token and the body. Strings borrow from the record's
/// bytes unless they hold escapes.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Meta<'a> {
    #[serde(borrow)]
    pub route: Cow<'a, str>,
    #[serde(borrow)]
    pub scope: Cow<'a, str>,
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    pub fingerprint: Digest,
    pub credentials: Digest,
    pub attempt: u32,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub status: Option<u16>,
    #[serde(borrow)]
    pub headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub body_stored: bool,
    /// `<trace id>-<span id>` of the execution that reserved the record; absent in
    /// records written without traces (or by versions before them).
    #[serde(default, borrow)]
    pub trace: Option<Cow<'a, str>>,
    /// When the attempt was first sent; absent in records of earlier versions (then the
    /// creation time stands in).
    #[serde(default)]
    pub sent_at_ms: Option<u64>,
    /// How an unknown outcome was settled, if it was (`reconciled`, `resolved`,
    /// `not_executed`).
    #[serde(default, borrow)]
    pub settled: Option<Cow<'a, str>>,
    /// The id of the key that sealed the response (`store.encryption`); the body
    /// section then holds the sealed bytes.
    #[serde(default, borrow)]
    pub sealed: Option<Cow<'a, str>>,
    /// What the sealed part's associated data covers (`seal/bound.rs`); absent in
    /// records sealed by earlier releases (format 1: the store key only).
    #[serde(default)]
    pub seal_format: Option<u8>,
}

/// A SHA-256 digest, stored as 64 hex digits: read as bytes straight from the line (no
/// UTF-8 check of text that is then decoded anyway).
#[derive(Debug, PartialEq)]
pub(super) struct Digest(pub [u8; 32]);

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        // Only lines the scan leaves to serde come here (an escaped digest, say).
        let text = String::deserialize(d)?;
        match crate::fast_hex::decode(text.as_bytes()) {
            Some(bytes) => Ok(Digest(bytes)),
            None => Err(serde::de::Error::custom("bad digest")),
        }
    }
}

impl<'a> Meta<'a> {
    pub(super) fn parse(line: &'a [u8]) -> Result<Meta<'a>, serde_json::Error> {
        match scan(line) {
            Some(meta) => Ok(meta),
            None => serde_json::from_slice(line),
        }
    }
}

/// The line in `encode.rs`'s exact shape, or `None`.
fn scan(line: &[u8]) -> Option<Meta<'_>> {
    let mut c = Cursor(line);
    c.lit(b"{\"route\":")?;
    let route = c.string()?;
    c.lit(b",\"scope\":")?;
    let scope = c.string()?;
    c.lit(b",\"key\":")?;
    let key = c.string()?;
    c.lit(b",\"fingerprint\":")?;
    let fingerprint = c.digest()?;
    c.lit(b",\"credentials\":")?;
    let credentials = c.digest()?;
    c.lit(b",\"attempt\":")?;
    let attempt = u32::try_from(c.uint()?).ok()?;
    c.lit(b",\"created_at_ms\":")?;
    let created_at_ms = c.uint()?;
    c.lit(b",\"expires_at_ms\":")?;
    let expires_at_ms = c.uint()?;
    c.lit(b",\"status\":")?;
    let status = match c.lit(b"null") {
        Some(()) => None,
        None => Some(u16::try_from(c.uint()?).ok()?),
    };
    c.lit(b",\"headers\":[")?;
    let mut headers = Vec::new();
    if c.lit(b"]").is_none() {
        loop {
            c.lit(b"[")?;
            let name = c.string()?;
            c.lit(b",")?;
            let value = c.string()?;
            c.lit(b"]")?;
            headers.push((Cow::Borrowed(name), Cow::Borrowed(value)));
            if c.lit(b"]").is_some() {
                break;
            }
            c.lit(b",")?;
        }
    }
    c.lit(b",\"body_stored\":")?;
    let body_stored = match c.lit(b"true") {
        Some(()) => true,
        None => c.lit(b"false").map(|()| false)?,
    };
    let trace = match c.lit(b",\"trace\":") {
        Some(()) => Some(Cow::Borrowed(c.string()?)),
        None => None,
    };
    let sent_at_ms = match c.lit(b",\"sent_at_ms\":") {
        Some(()) => Some(c.uint()?),
        None => None,
    };
    let settled = match c.lit(b",\"settled\":") {
        Some(()) => Some(Cow::Borrowed(c.string()?)),
        None => None,
    };
    let sealed = match c.lit(b",\"sealed\":") {
        Some(()) => Some(Cow::Borrowed(c.string()?)),
        None => None,
    };
    let seal_format = match c.lit(b",\"seal_format\":") {
        Some(()) => Some(u8::try_from(c.uint()?).ok()?),
        None => None,
    };
    c.lit(b"}")?;
    if !c.0.is_empty() {
        return None;
    }
    Some(Meta {
        route: Cow::Borrowed(route),
        scope: Cow::Borrowed(scope),
        key: Cow::Borrowed(key),
        fingerprint,
        credentials,
        attempt,
        created_at_ms,
        expires_at_ms,
        status,
        headers,
        body_stored,
        trace,
        sent_at_ms,
        settled,
        sealed,
        seal_format,
    })
}

/// What is left of the line.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn lit(&mut self, expected: &[u8]) -> Option<()> {
        self.0 = self.0.strip_prefix(expected)?;
        Some(())
    }

    /// A quoted string without escapes or control characters (which JSON forbids raw).
    fn string(&mut self) -> Option<&'a str> {
        self.lit(b"\"")?;
        let end = memchr::memchr2(b'"', b'\\', self.0)?;
        let raw = &self.0[..end];
        // No early exit: this form compiles to a vector loop.
        if self.0[end] != b'"' || raw.iter().fold(false, |seen, &b| seen | (b < 0x20)) {
            return None;
        }
        let text = std::str::from_utf8(raw).ok()?;
        self.0 = &self.0[end + 1..];
        Some(text)
    }

    /// A quoted digest of 64 hex digits.
    fn digest(&mut self) -> Option<Digest> {
        self.lit(b"\"")?;
        let hex = self.0.get(..64)?;
        self.0 = &self.0[64..];
        self.lit(b"\"")?;
        crate::fast_hex::decode(hex).map(Digest)
    }

    /// A JSON non-negative integer: digits, no leading zero, fits in a `u64`. One pass
    /// over the digits (every replay reads five of these).
    fn uint(&mut self) -> Option<u64> {
        let mut value: u64 = 0;
        let mut digits = 0;
        for &b in self.0 {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            value = value.checked_mul(10)?.checked_add(u64::from(d))?;
            digits += 1;
        }
        if digits == 0 || (digits > 1 && self.0[0] == b'0') {
            return None;
        }
        self.0 = &self.0[digits..];
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::decode::tests::completed;
    use super::super::encode::encode;
    use super::*;
    use crate::store::{Record, StoredResponse};

    fn line(record: &Record) -> Vec<u8> {
        let bytes = encode(record);
        let meta = &bytes[34..];
        meta[..meta.iter().position(|&b| b == b'\n').unwrap()].to_vec()
    }

    /// Lines the scan reads (the first three) and one it leaves to serde (an escaped key).
    fn samples() -> Vec<Vec<u8>> {
        let pending = Record::in_progress("charge", "", "inv-1", [7; 32], [0; 32], Duration::ZERO);
        let mut done = completed(Some(b""));
        done.key = "inv-1".to_owned();
        let stored = StoredResponse {
            status: 201,
            headers: vec![],
            body: None,
        };
        let bare = pending.completed(stored, Duration::MAX);
        let escaped = completed(None);
        let mut traced = pending.clone();
        traced.trace = Some(Box::new(crate::traces::TraceLink {
            trace_id: [0xab; 16],
            span_id: [0x01; 8],
        }));
        let mut sealed = bare.clone();
        sealed.response = None;
        sealed.settled = Some(crate::store::Settled::Resolved);
        sealed.sealed = Some(Box::new(crate::store::seal::Sealed {
            key_id: "k1".to_owned(),
            bytes: bytes::Bytes::from_static(b"x"),
            format: crate::store::seal::FORMAT,
        }));
        [pending, done, bare, escaped, traced, sealed]
            .iter()
            .map(line)
            .collect()
    }

    #[test]
    fn the_scan_reads_what_the_encoder_writes() {
        for (i, line) in samples().iter().enumerate() {
            let serde: Meta = serde_json::from_slice(line).unwrap();
            // The sample with escapes is left to serde; the others are scanned.
            assert_eq!(
                scan(line).is_some(),
                i != 3,
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(Meta::parse(line).unwrap(), serde);
        }
    }

    /// Wherever the scan accepts a damaged line, serde accepts it with the same values.
    #[test]
    fn the_scan_never_accepts_what_serde_reads_differently() {
        let replacements = [
            b'"', b'\\', b'0', b'1', b'9', b',', b']', b'}', b' ', b'\n', 0xff,
        ];
        for line in samples() {
            for at in 0..line.len() {
                let mut cases = vec![line[..at].to_vec(), [&line[..at], &line[at + 1..]].concat()];
                for &r in &replacements {
                    let mut changed = line.clone();
                    changed[at] = r;
                    cases.push(changed);
                }
                for case in cases {
                    if let Some(scanned) = scan(&case) {
                        let serde: Meta = serde_json::from_slice(&case)
                            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&case)));
                        assert_eq!(scanned, serde, "{}", String::from_utf8_lossy(&case));
                    }
                }
            }
        }
    }

    #[test]
    fn numbers_out_of_range_or_with_leading_zeros_are_left_to_serde() {
        let good = String::from_utf8(samples()[1].clone()).unwrap();
        for (from, to) in [
            ("\"attempt\":1", "\"attempt\":4294967296"),
            ("\"attempt\":1", "\"attempt\":01"),
            ("\"status\":402", "\"status\":65536"),
        ] {
            let bad = good.replace(from, to);
            assert_ne!(bad, good);
            assert!(scan(bad.as_bytes()).is_none(), "{bad}");
            assert!(
                serde_json::from_slice::<Meta>(bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
    }
}
