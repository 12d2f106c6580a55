//! The store's identity for an intent, and the length-prefixed SHA-256 it is made with:
//! a leaf (it imports nothing of idem's but the hex encoder), so the stores, MCP and the
//! traces name a key without depending on key derivation (`key.rs`), which builds it.

use std::fmt;

use ring::digest::{Context, SHA256};

/// A map keyed by store keys. Keys are SHA-256 digests, so SipHash (std's default,
/// ~250 instructions per 32-byte key) buys nothing over foldhash's seeded hash (~30);
/// these maps are touched several times per protected request.
pub type KeyMap<V> = std::collections::HashMap<StoreKey, V, foldhash::fast::RandomState>;

/// The store's identity for an intent: SHA-256 over length-prefixed (route, scope, key),
/// so `("a", "bc")` and `("ab", "c")` never collide. Hex only when printed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreKey(pub [u8; 32]);

// === impl StoreKey ===

impl StoreKey {
    pub fn new(route: &str, scope: &str, key: &str) -> StoreKey {
        StoreKey(hash_fields(&[
            route.as_bytes(),
            scope.as_bytes(),
            key.as_bytes(),
        ]))
    }
}

/// SHA-256 over `fields`, each preceded by its length (u64 big-endian), so no two
/// different lists of fields hash the same bytes.
pub fn hash_fields(fields: &[&[u8]]) -> [u8; 32] {
    let mut h = Prefixed::new();
    for field in fields {
        h.field(field);
    }
    h.finish()
}

impl StoreKey {
    /// The 64 lowercase hex characters of `Display`, without allocating.
    pub fn hex(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        crate::fast_hex::encode_into(&self.0, &mut out);
        out
    }
}

impl fmt::Display for StoreKey {
    /// Lowercase hex in one write: it goes on every request's log line and span, where
    /// 32 `{:02x}` writes cost ~8k instructions.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex();
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreKey({self})")
    }
}

// === hashing helper ===

/// SHA-256 fed with length-prefixed fields. ring's, not the `sha2` crate's: the same
/// digest, from assembly that takes a third fewer instructions where the CPU has no
/// SHA extensions (and uses them where it has).
///
/// Tags, lengths and short fields are gathered in a small buffer and handed to ring in
/// one piece: each `Context::update` has a fixed cost of bookkeeping whatever its
/// length, and a fingerprint is a dozen pieces of a few bytes (−0.5k instructions per
/// fresh intent under callgrind). The bytes hashed, and so the digest, are the same.
pub(crate) struct Prefixed {
    context: Context,
    staged: [u8; STAGE],
    len: usize,
}

/// Room for the fixed parts and the short fields (method, path, a key's parts).
const STAGE: usize = 256;

impl Prefixed {
    pub(crate) fn new() -> Self {
        Prefixed {
            context: Context::new(&SHA256),
            staged: [0; STAGE],
            len: 0,
        }
    }

    pub(crate) fn field(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.put(bytes);
    }

    pub(crate) fn count(&mut self, n: usize) {
        self.put(&(n as u64).to_be_bytes());
    }

    /// A one-byte marker naming the part that follows.
    pub(crate) fn tag(&mut self, tag: u8) {
        self.put(&[tag]);
    }

    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() <= STAGE {
            self.staged[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
            return;
        }
        self.flush();
        if bytes.len() <= STAGE {
            self.staged[..bytes.len()].copy_from_slice(bytes);
            self.len = bytes.len();
        } else {
            self.context.update(bytes);
        }
    }

    fn flush(&mut self) {
        if self.len > 0 {
            self.context.update(&self.staged[..self.len]);
            self.len = 0;
        }
    }

    pub(crate) fn finish(mut self) -> [u8; 32] {
        self.flush();
        let mut out = [0u8; 32];
        out.copy_from_slice(self.context.finish().as_ref());
        out
    }
}
