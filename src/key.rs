//! Pure key derivation: route policy + request view → rendered key, store key,
//! fingerprint, credential hash. No I/O.

use std::fmt;

/// The store's identity for an intent: SHA-256 over length-prefixed (route, scope, key),
/// so `("a", "bc")` and `("ab", "c")` never collide. Hex only when printed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreKey(pub [u8; 32]);

impl StoreKey {
    pub fn new(route: &str, scope: &str, key: &str) -> StoreKey {
        let _ = (route, scope, key);
        unimplemented!("store key hashing")
    }
}

impl fmt::Display for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreKey({self})")
    }
}
