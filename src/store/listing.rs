//! What [`Store::list_in_progress`](super::Store::list_in_progress) returns, whatever the
//! backend: in-progress records ordered by when their lease ends (so unknown outcomes,
//! whose lease ended longest ago, come first and a `limit` never cuts them in favour of
//! calls still in flight), at most `limit` of them.

use super::{Record, RecordState};
use crate::store_key::StoreKey;

/// The `limit` in-progress records whose leases end first among those pushed. A scan
/// over a large keyspace holds at most twice `limit` records at a time.
pub(crate) struct Soonest {
    limit: usize,
    items: Vec<(StoreKey, Record)>,
}

impl Soonest {
    pub(crate) fn new(limit: usize) -> Soonest {
        Soonest {
            limit,
            items: Vec::new(),
        }
    }

    /// Keeps `record` if it is in progress (completed ones are skipped).
    pub(crate) fn push(&mut self, key: StoreKey, record: Record) {
        if record.state != RecordState::InProgress {
            return;
        }
        self.items.push((key, record));
        if self.items.len() >= self.limit.saturating_mul(2).max(64) {
            self.trim();
        }
    }

    pub(crate) fn finish(mut self) -> Vec<(StoreKey, Record)> {
        self.trim();
        self.items
    }

    fn trim(&mut self) {
        // The key breaks ties, so the order is the same on every replica.
        self.items
            .sort_unstable_by_key(|(key, r)| (r.expires_at_ms, r.sent_at_ms, key.0));
        self.items.truncate(self.limit);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::StoredResponse;

    #[test]
    fn keeps_the_soonest_leases_and_skips_completed() {
        let mut soonest = Soonest::new(2);
        for (n, lease_ms) in [(1u8, 300u64), (2, 100), (3, 200), (4, 50)] {
            let mut r = Record::in_progress("r", "", "k", [0; 32], [0; 32], Duration::ZERO);
            r.expires_at_ms = lease_ms;
            if n == 4 {
                let response = StoredResponse {
                    status: 200,
                    headers: vec![],
                    body: None,
                };
                r = r.completed(response, Duration::ZERO);
            }
            soonest.push(StoreKey([n; 32]), r);
        }
        let keys: Vec<u8> = soonest.finish().iter().map(|(k, _)| k.0[0]).collect();
        assert_eq!(keys, vec![2, 3]);
    }
}
