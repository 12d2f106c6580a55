//! Names in Redis: the record's key and the channel its wake-ups go to.
//!
//! Standalone and Sentinel: `{key_prefix}<hex>` and one channel, `{key_prefix}events`.
//!
//! Cluster: every operation on one key must touch one slot, and a script may only
//! `SPUBLISH` on a shard channel its node serves. So the record key carries a hash tag
//! of its first byte, `{key_prefix}{ab}<hex>`, and its wake-ups go to the shard channel
//! `{key_prefix}events:{ab}` in the same slot. Why sharded pub/sub rather than plain
//! `PUBLISH`: a plain publish is broadcast over the cluster bus to every node, so its
//! cost grows with the cluster; a shard message stays within the one shard that holds
//! the key. The 256 tags spread records over 256 slots (plenty for any number of
//! masters short of hundreds), and each replica subscribes to the 256 channels once,
//! never per waited key, so registering a waiter stays a purely local step.

use std::sync::Arc;

use crate::store_key::StoreKey;

/// Hash-tag buckets in cluster mode: one per value of the key's first byte.
pub(super) const BUCKETS: usize = 256;

#[derive(Clone)]
pub(super) struct Layout {
    prefix: Arc<str>,
    /// Cluster mode: hash-tagged keys, one shard channel per bucket.
    sharded: bool,
    /// The one channel (standalone, sentinel).
    channel: Arc<str>,
}

impl Layout {
    pub(super) fn new(prefix: &str, sharded: bool) -> Layout {
        Layout {
            prefix: prefix.into(),
            sharded,
            channel: format!("{prefix}events").into(),
        }
    }

    pub(super) fn sharded(&self) -> bool {
        self.sharded
    }

    /// The record's key.
    pub(super) fn store_key(&self, key: &StoreKey) -> Vec<u8> {
        let hex = key.hex();
        let mut out = Vec::with_capacity(self.prefix.len() + 68);
        out.extend_from_slice(self.prefix.as_bytes());
        if self.sharded {
            out.push(b'{');
            out.extend_from_slice(&hex[..2]);
            out.push(b'}');
        }
        out.extend_from_slice(&hex);
        out
    }

    /// The `SCAN MATCH` pattern of every record key: the prefix (glob characters
    /// escaped), then anything.
    pub(super) fn scan_pattern(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + 2);
        for &b in self.prefix.as_bytes() {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                out.push(b'\\');
            }
            out.push(b);
        }
        out.push(b'*');
        out
    }

    /// The [`StoreKey`] of a record key written by [`Layout::store_key`]; `None` for any
    /// other name under the prefix (another program's key, a shorter or longer name).
    pub(super) fn parse_store_key(&self, name: &[u8]) -> Option<StoreKey> {
        let hex = name.strip_prefix(self.prefix.as_bytes())?;
        let hex = match self.sharded {
            true => {
                let (tag, hex) = (hex.get(..4)?, hex.get(4..)?);
                (tag[0] == b'{' && tag[3] == b'}' && tag[1..3] == *hex.get(..2)?).then_some(hex)?
            }
            false => hex,
        };
        if hex.iter().any(u8::is_ascii_uppercase) {
            return None;
        }
        crate::fast_hex::decode(hex).map(StoreKey)
    }

    /// The channel that wakes watchers of `key`.
    pub(super) fn channel(&self, key: &StoreKey) -> Arc<str> {
        if self.sharded {
            bucket_channel(&self.channel, &key.hex()[..2]).into()
        } else {
            self.channel.clone()
        }
    }

    /// Every open index (the records not completed, kept by the scripts): `{prefix}open`,
    /// or in cluster mode one per hash-tag bucket, `{prefix}{ab}open`, in the slot of
    /// that bucket's records. Never a record key: those end in 64 hex digits.
    pub(super) fn open_indexes(&self) -> Vec<Vec<u8>> {
        if !self.sharded {
            return vec![format!("{}open", self.prefix).into_bytes()];
        }
        (0..BUCKETS)
            .map(|b| format!("{}{{{b:02x}}}open", self.prefix).into_bytes())
            .collect()
    }

    /// How many open indexes there are (see [`Layout::open_indexes`]).
    pub(super) fn open_index_count(&self) -> u64 {
        if self.sharded {
            BUCKETS as u64
        } else {
            1
        }
    }

    /// The [`StoreKey`] of an open index's member (the record key's 64 hex digits).
    pub(super) fn indexed_key(&self, member: &[u8]) -> Option<StoreKey> {
        if member.len() != 64 || member.iter().any(u8::is_ascii_uppercase) {
            return None;
        }
        crate::fast_hex::decode(member).map(StoreKey)
    }

    /// Every channel a replica subscribes to.
    pub(super) fn all_channels(&self) -> Vec<String> {
        if !self.sharded {
            return vec![self.channel.to_string()];
        }
        (0..BUCKETS)
            .map(|b| bucket_channel(&self.channel, format!("{b:02x}")))
            .collect()
    }
}

fn bucket_channel(base: &str, tag: impl AsRef<[u8]>) -> String {
    let tag = String::from_utf8_lossy(tag.as_ref());
    format!("{base}:{{{tag}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_key_and_channel_share_a_hash_tag() {
        let layout = Layout::new("idem:", true);
        let key = StoreKey([0xab; 32]);
        let name = String::from_utf8(layout.store_key(&key)).unwrap();
        assert_eq!(name, format!("idem:{{ab}}{}", "ab".repeat(32)));
        assert_eq!(&*layout.channel(&key), "idem:events:{ab}");
        let all = layout.all_channels();
        assert_eq!(all.len(), 256);
        assert!(all.contains(&"idem:events:{ab}".to_string()));
        // The open index of the key's bucket is its record key with `open` for the hex
        // digits (what the scripts compute), so it is in the same slot.
        let index = b"idem:{ab}open".to_vec();
        assert!(layout.open_indexes().contains(&index));
        assert_eq!(layout.open_indexes().len(), 256);
        assert_eq!(layout.indexed_key(&key.hex()), Some(key));
    }

    #[test]
    fn record_keys_parse_back_and_nothing_else_does() {
        let key = StoreKey([0xab; 32]);
        for sharded in [false, true] {
            let layout = Layout::new("idem:*", sharded);
            assert_eq!(layout.parse_store_key(&layout.store_key(&key)), Some(key));
            assert_eq!(layout.scan_pattern(), b"idem:\\**".to_vec());
            for other in ["idem:*events", "idem:*{ab}ab", "other:ab"] {
                assert_eq!(layout.parse_store_key(other.as_bytes()), None, "{other}");
            }
        }
        let cluster = Layout::new("p:", true);
        let mut wrong_tag = cluster.store_key(&key);
        wrong_tag[3] = b'c';
        assert_eq!(cluster.parse_store_key(&wrong_tag), None);
    }

    #[test]
    fn standalone_layout_is_unchanged() {
        let layout = Layout::new("idem:", false);
        let key = StoreKey([0xab; 32]);
        let name = String::from_utf8(layout.store_key(&key)).unwrap();
        assert_eq!(name, format!("idem:{}", "ab".repeat(32)));
        assert_eq!(&*layout.channel(&key), "idem:events");
        assert_eq!(layout.all_channels(), vec!["idem:events".to_string()]);
    }
}
