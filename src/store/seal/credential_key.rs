//! The credential hash keyed (issue 32 §2, `store.encryption.credential_key_file`).
//!
//! A record carries the hash of its caller's `bind_credentials` headers, readable in the
//! store. As a plain SHA-256 it lets whoever reads a dump test guesses offline (a weak
//! API key, a Basic password). With a credential key it is HMAC-SHA256 under that key
//! of the SHA-256 digest, so a dump alone tells nothing.
//!
//! Why a key of its own rather than one derived from the sealing keys: the hash must
//! stay the same for a record's whole `retention`, across key rotation. Derived from the
//! first (sealing) key it would change at every rotation, and every repeat of a record
//! stored before would become a 403 `credential_mismatch`; derived from whichever key
//! sealed the record, an in-progress record (not sealed) would have none. A dedicated
//! key that is never rotated casually avoids both. Changing it makes the records stored
//! before refuse their repeats (403, never a second execution) until they expire.
//!
//! Records stored with a plain SHA-256 (before the key was set, or by an earlier release)
//! still match: the caller's plain digest is compared too. That only lets a caller match
//! a record made with their own credentials, so it binds nothing less.

use ring::hmac;

use super::Keyring;

impl Keyring {
    /// This keyring with `file`'s 32 bytes (base64, as the sealing keys) keying the
    /// credential hash. Errors name the file, never its content.
    pub fn with_credential_key(mut self, file: &std::path::Path) -> Result<Keyring, String> {
        let bytes = super::read_key_bytes(file)?;
        self.credential_key = Some(hmac::Key::new(hmac::HMAC_SHA256, &bytes));
        Ok(self)
    }

    /// Whether a credential key is set.
    pub fn keys_credentials(&self) -> bool {
        self.credential_key.is_some()
    }

    /// `digest` (the plain credential hash) keyed, or `None` without a credential key.
    pub fn credential_hash(&self, digest: &[u8; 32]) -> Option<[u8; 32]> {
        let key = self.credential_key.as_ref()?;
        let tag = hmac::sign(key, digest);
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::keyring;

    #[test]
    fn keyed_hashes_differ_from_the_digest_and_between_keys() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, byte: u8| {
            let path = dir.path().join(name);
            let text =
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [byte; 32]);
            std::fs::write(&path, text).unwrap();
            path
        };
        let (ring, _d) = keyring(&[("k1", [7; 32])]);
        assert_eq!(ring.credential_hash(&[1; 32]), None);
        let a = ring.with_credential_key(&write("a", 1)).unwrap();
        let keyed = a.credential_hash(&[1; 32]).unwrap();
        assert_ne!(keyed, [1; 32]);
        assert_eq!(a.credential_hash(&[1; 32]), Some(keyed), "stable");
        let (ring, _d) = keyring(&[("k1", [7; 32])]);
        let b = ring.with_credential_key(&write("b", 2)).unwrap();
        assert_ne!(b.credential_hash(&[1; 32]), Some(keyed));
        let short = dir.path().join("short");
        std::fs::write(&short, "c2VjcmV0").unwrap();
        let (ring, _d) = keyring(&[("k1", [7; 32])]);
        let err = ring.with_credential_key(&short).unwrap_err();
        assert!(
            err.contains("holds 6 bytes") && !err.contains("secret"),
            "{err}"
        );
    }
}
