//! One case's world: the model's store per key, the real stores the proxies and the
//! operator use, the clock, and what each side remembers of the attempts it started.
//!
//! Each side keeps its own books (the model's tokens, the real records the proxies
//! hold), so a side that went astray shows up as a different answer, not as a runner
//! that followed the other side.
//!
//! The proxies' clocks are skewed ([`SKEW_MS`]): the estimates a proxy puts in the
//! records it writes (`expires_at_ms`, `sent_at_ms`) are off by seconds, as they may be
//! across replicas. A store must replace them with its own clock or keep what it
//! stored (SPEC §1 "One clock for every lease"); one that keeps an estimate answers a
//! different number of ticks than the model.

use std::collections::HashMap;
use std::time::Duration;

use idem::key::StoreKey;
use idem::store::{Record as RealRecord, Store, Token as RealToken};
use idem_model::{ModelStore, Token};

use super::clock::Schedule;
use super::ops::Proxy;
use super::view::Names;

/// The lease a reservation, renewal or takeover grants, in ticks.
pub const LEASE_TICKS: u64 = 2;
/// Records live far longer than any case.
pub const RETENTION: Duration = Duration::from_secs(3600);
/// Each proxy's clock against the store's (A, B, C), in ms: none whole ticks, none
/// zero (an unskewed proxy's estimates are right by chance, and A is drawn the most).
const SKEW_MS: [i64; 3] = [4_321, -2_345, 1_234];
/// The operator's.
const OPERATOR_SKEW_MS: i64 = 6_789;
/// The outcome id of an operator's resolution (a proxy's is its index + 1).
pub const OPERATOR_OUTCOME: u8 = 9;

/// The real stores of a backend: one handle per proxy (for Redis and PostgreSQL a
/// replica of its own, with its own connections and, for Redis, its own map of the
/// keys it owns) and one for the operator.
pub struct Stores {
    pub proxies: [Store; 3],
    pub operator: Store,
}

/// A proxy's attempt in the model: its token and attempt number.
#[derive(Clone, Copy)]
pub struct ModelAttempt {
    pub token: Token,
    pub attempt: u8,
}

pub struct World<'a> {
    pub stores: &'a Stores,
    pub clock: Schedule,
    pub keys: Vec<StoreKey>,
    /// The client's key of each store key (the record's `key` field).
    pub ids: Vec<String>,
    /// The model's store, one per key.
    pub model: Vec<ModelStore>,
    /// Per proxy and key: its current attempt in the model.
    pub model_attempts: [Vec<Option<ModelAttempt>>; 3],
    /// Per proxy and key: the record of its current attempt as it holds it.
    pub real_attempts: [Vec<Option<RealRecord>>; 3],
    /// Per key: the operator's last resolution, in the model and for real.
    pub model_operator: Vec<Option<Token>>,
    pub real_operator: Vec<Option<RealToken>>,
    pub names: Names,
    issued: HashMap<&'static str, u32>,
    next_token: Token,
}

impl<'a> World<'a> {
    /// A world on fresh keys (`case` makes them unique in the store), clock at tick 0.
    pub fn new(stores: &'a Stores, clock: Schedule, case: &str, keys: usize) -> World<'a> {
        let ids: Vec<String> = (0..keys).map(|k| format!("{case}-k{}", k + 1)).collect();
        World {
            stores,
            clock,
            keys: ids
                .iter()
                .map(|id| StoreKey::new("model", "", id))
                .collect(),
            ids,
            model: (0..keys).map(|_| ModelStore::new(LEASE_TICKS)).collect(),
            model_attempts: std::array::from_fn(|_| vec![None; keys]),
            real_attempts: std::array::from_fn(|_| vec![None; keys]),
            model_operator: vec![None; keys],
            real_operator: vec![None; keys],
            names: Names::default(),
            issued: HashMap::new(),
            next_token: 1,
        }
    }

    /// A fresh model token for `who` (a proxy's name or `op`), and its name (`B2`).
    pub fn issue(&mut self, who: &'static str) -> (String, Token) {
        let n = self.issued.entry(who).or_insert(0);
        *n += 1;
        let token = self.next_token;
        self.next_token += 1;
        (format!("{who}{n}"), token)
    }

    /// The lease the stores are given: [`LEASE_TICKS`] half a tick short.
    pub fn lease(&self) -> Duration {
        self.clock.span(LEASE_TICKS)
    }

    /// A fresh reservation of key `k` as proxy `p` builds it, its clock's estimates in.
    pub fn reservation(&self, p: Proxy, k: usize) -> RealRecord {
        let id = &self.ids[k];
        let fresh = RealRecord::in_progress("model", "", id, [1; 32], [2; 32], self.lease());
        skewed(fresh, SKEW_MS[p.index()], true)
    }

    /// `record`, built by proxy `p` from its own clock, with that clock's skew.
    pub fn by_proxy(&self, p: Proxy, record: RealRecord) -> RealRecord {
        skewed(record, SKEW_MS[p.index()], false)
    }

    /// `record`, built by the operator's admin API from its clock.
    pub fn by_operator(&self, record: RealRecord) -> RealRecord {
        skewed(record, OPERATOR_SKEW_MS, false)
    }
}

/// The record a constructor built from this process's clock, as a process whose clock
/// is `skew` ms off would have built it: the lease's (or retention's) end moved, and for
/// a fresh reservation its creation and first send.
fn skewed(mut record: RealRecord, skew: i64, fresh: bool) -> RealRecord {
    let by = |ms: u64| ms.saturating_add_signed(skew);
    record.expires_at_ms = by(record.expires_at_ms);
    if fresh {
        record.created_at_ms = by(record.created_at_ms);
        record.sent_at_ms = by(record.sent_at_ms);
    }
    record
}
