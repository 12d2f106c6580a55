//! Sealing as one layer of the store (issue 32 §2): every record a [`Store`] writes is
//! sealed on its way in and every record it reads is opened on its way out, with the
//! keyring of `store.encryption` that a reload swaps.
//!
//! Why a layer and not a call at each writer: a record is written by the proxy's
//! reservation, renewal, completion, takeover and settlement, and by the admin's
//! resolutions; each was once sealed by hand, and an in-progress record, which none of
//! them sealed, kept the raw key and scope readable in the store. Here no writer can
//! forget: the store's write operations take the record in clear and store its sealed
//! copy ([`Keyring::sealed_copy`]); the read operations hand back records opened. A record
//! that no listed key opens comes back still sealed (`record.sealed` is `Some`): the
//! proxy answers it 409 `record_unreadable`, the admin shows `sealed_with`.
//!
//! The keyring is loaded here from the files `store.encryption` names; the configuration
//! holds only their ids and paths, so key material lives in one place.
//!
//! Without `store.encryption` the layer costs one relaxed atomic load and a branch per
//! operation, no allocation: the keyring sits behind an `ArcSwapOption` (swapped on
//! reload, shared by every worker's store handle and the admin's), and `on` says
//! whether to look at it at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::config::EncryptionConfig;
use super::seal::{Keyring, Sealed, Unreadable};
use super::Record;
use crate::store_key::StoreKey;

/// The sealing layer's keys, shared by every handle of one store.
#[derive(Clone, Default)]
pub struct Sealing(Arc<Keys>);

#[derive(Default)]
struct Keys {
    /// Whether a keyring is set: the only thing read when encryption is off.
    on: AtomicBool,
    keyring: ArcSwapOption<Keyring>,
}

impl Sealing {
    /// No encryption: records are stored and read as they are.
    pub fn off() -> Sealing {
        Sealing::default()
    }

    /// Sealing with `keyring` (`None`: off).
    pub fn with(keyring: Option<Keyring>) -> Sealing {
        let sealing = Sealing::off();
        sealing.set(keyring);
        sealing
    }

    /// The layer for `store.encryption`, its key files read now. Errors name a file,
    /// never its content.
    pub fn load(cfg: Option<&EncryptionConfig>) -> Result<Sealing, String> {
        Ok(Sealing::with(load_keyring(cfg)?))
    }

    /// Swap in the keys of a reloaded `store.encryption` (every handle of the store sees
    /// them at its next operation). On an error nothing changes.
    pub fn reload(&self, cfg: Option<&EncryptionConfig>) -> Result<(), String> {
        self.set(load_keyring(cfg)?);
        Ok(())
    }

    fn set(&self, keyring: Option<Keyring>) {
        let on = keyring.is_some();
        // Keys first when turning on, the flag first when turning off: a reader that
        // sees the flag finds the keys, or treats a missing keyring as off.
        if on {
            self.0.keyring.store(keyring.map(Arc::new));
            self.0.on.store(true, Ordering::Release);
        } else {
            self.0.on.store(false, Ordering::Release);
            self.0.keyring.store(None);
        }
    }

    /// `f` of the keyring, when encryption is on. Through `ArcSwap`'s guard (a
    /// thread-local slot), not a clone of the `Arc`: every worker seals and opens with
    /// the same keyring, and a shared reference count would bounce between cores.
    #[inline]
    fn with_keyring<T>(&self, f: impl FnOnce(&Keyring) -> Option<T>) -> Option<T> {
        if !self.0.on.load(Ordering::Relaxed) {
            return None;
        }
        f(self.0.keyring.load().as_deref()?)
    }

    /// Whether records are sealed.
    pub fn is_on(&self) -> bool {
        self.0.on.load(Ordering::Relaxed)
    }

    /// The sealed copy of `record` to store under `key`, or `None` to store it as it is
    /// (encryption off, or already sealed). Boxed: the caller's future holds one pointer.
    #[inline]
    pub(super) fn seal(&self, record: &Record, key: &StoreKey) -> Option<Box<Record>> {
        self.with_keyring(|keyring| keyring.sealed_copy(record, key).map(Box::new))
    }

    /// Open `record`, read under `key`, in place; one that does not open stays sealed.
    /// While encryption is on, a record read in clear is marked unreadable
    /// ([`Sealed::unsealed`]) unless `accept_unsealed_until` covers it: a store writer
    /// without the key must not plant an answer (issue 46 §1).
    #[inline]
    pub(super) fn open(&self, record: &mut Record, key: &StoreKey) {
        if record.sealed.is_none() {
            self.with_keyring(|keyring| {
                if !keyring.accepts_unsealed(record.created_at_ms) {
                    record.sealed = Some(Box::new(Sealed::unsealed()));
                }
                Some(())
            });
            return;
        }
        self.with_keyring(|keyring| keyring.open(record, key).ok());
    }

    /// Why a record that came back still sealed does not open here, for the log line
    /// of its 409 `record_unreadable`.
    pub fn why_unreadable(&self, record: &Record) -> Option<Unreadable> {
        let sealed = record.sealed.as_deref()?;
        let why = self.with_keyring(|keyring| Some(keyring.why_unreadable(sealed)));
        Some(
            why.unwrap_or_else(|| {
                Unreadable("this replica has no store.encryption keys".to_owned())
            }),
        )
    }

    /// The credential hash a record made now carries for the plain `digest`: keyed
    /// with `store.encryption.credential_key_file`, or `None` without one.
    #[inline]
    pub fn credential_hash(&self, digest: &[u8; 32]) -> Option<[u8; 32]> {
        self.with_keyring(|keyring| keyring.credential_hash(digest))
    }
}

impl std::fmt::Debug for Sealing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ids only, through the keyring's own `Debug`.
        let ids = self.with_keyring(|k| Some(k.ids().map(str::to_owned).collect::<Vec<_>>()));
        f.debug_struct("Sealing").field("ids", &ids).finish()
    }
}

/// The keyring `cfg` names, each file read once; an error starts with where the
/// configuration names the file (`cfg.places`).
fn load_keyring(cfg: Option<&EncryptionConfig>) -> Result<Option<Keyring>, String> {
    let Some(cfg) = cfg else {
        return Ok(None);
    };
    let at = |place: Option<&String>, message: String| match place {
        Some(place) => format!("{place}: {message}"),
        None => message,
    };
    let keyring = Keyring::load(&cfg.keys)
        .map_err(|(i, message)| at(i.and_then(|i| cfg.places.keys.get(i)), message))?
        .accepting_unsealed_until(cfg.accept_unsealed_until_ms);
    Ok(Some(match &cfg.credential_key_file {
        Some(file) => keyring
            .with_credential_key(file)
            .map_err(|message| at(cfg.places.credential_key_file.as_ref(), message))?,
        None => keyring,
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn off_stores_as_it_is_and_a_reload_turns_it_on_and_off() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k1");
        let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [3; 32]);
        std::fs::write(&file, text).unwrap();
        let cfg = EncryptionConfig {
            keys: vec![("k1".to_owned(), file)],
            credential_key_file: None,
            accept_unsealed_until_ms: None,
            places: Default::default(),
        };
        let key = StoreKey::new("r", "ada@example.com", "charge:1");
        let r = Record::in_progress(
            "r",
            "ada@example.com",
            "charge:1",
            [1; 32],
            [2; 32],
            Duration::ZERO,
        );
        let sealing = Sealing::off();
        assert!(sealing.seal(&r, &key).is_none());
        sealing.reload(Some(&cfg)).unwrap();
        let mut sealed = *sealing.seal(&r, &key).expect("sealed");
        assert_eq!((sealed.key.as_str(), sealed.scope.as_str()), ("", ""));
        assert!(sealing.seal(&sealed, &key).is_none(), "sealed once");
        let other = Sealing::off();
        other.open(&mut sealed, &key);
        assert!(sealed.sealed.is_some(), "no keys: stays sealed");
        assert!(other.why_unreadable(&sealed).is_some());
        sealing.open(&mut sealed, &key);
        assert_eq!(sealed, r);
        sealing.reload(None).unwrap();
        assert!(sealing.seal(&r, &key).is_none());
        assert!(sealing
            .reload(Some(&EncryptionConfig {
                keys: vec![],
                credential_key_file: None,
                accept_unsealed_until_ms: None,
                places: Default::default(),
            }))
            .is_err());
    }
}
