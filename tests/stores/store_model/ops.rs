//! The operations a case applies, in the words a failing sequence is read in, and how
//! proptest draws them.
//!
//! Three proxies (`A`, `B`, `C`) and an operator share one store and one or two keys.
//! Clock moves are operations too: they are the only way leases end and key windows
//! pass, so shrinking keeps exactly the moves a failure needs.

use std::fmt;

use proptest::prelude::*;

/// A proxy. Each owns at most one attempt per key at a time: the token of the
/// reservation or takeover it last won there, until it completes or releases it. A
/// proxy that holds none writes with a token no one holds: a stale owner, refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proxy {
    A,
    B,
    C,
}

impl Proxy {
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        ["A", "B", "C"][self.index()]
    }
}

/// Whose attempt a takeover believes it read: the record stored right now (a duplicate
/// that just read it), or some proxy's or the operator's last attempt on the key,
/// maybe replaced since (a duplicate that decided on an older read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Current,
    Proxy(Proxy),
    Operator,
}

/// One of the (at most two) keys of a case.
pub type Key = usize;

/// What an operator records for an unknown outcome (the admin's `resolve`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    Completed { ok: bool },
    NotExecuted,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The store's clock moves on by this many ticks.
    Tick(u8),
    /// A request reaches the proxy: `reserve` with a fresh token.
    Reserve(Proxy, Key),
    /// The proxy stores its attempt's outcome (`replace_if_owner` with the completed
    /// record): a success or a definitive failure.
    Complete(Proxy, Key, bool),
    /// The proxy renews its attempt's lease (`renew`).
    Renew(Proxy, Key),
    /// The proxy deletes its attempt, nothing having been sent (`release_if_owner`).
    Release(Proxy, Key),
    /// The proxy ends its attempt's lease now, keeping the record (a takeover whose
    /// send failed): `replace_if_owner` with `lease_ended_now`.
    EndLease(Proxy, Key),
    /// The proxy takes over the attempt it read (`take_over`), with the key window in
    /// ticks of `on_unknown: retry` under `upstream_key_window`, or without one.
    TakeOver(Proxy, Key, Seen, Option<u8>),
    /// The operator resolves the key's unknown outcome as the admin API does: read the
    /// record and the store's clock, refuse unless it is an unknown outcome, then
    /// `take_over` with the token read.
    Resolve(Key, Resolution),
    /// A read of the record (`get`).
    Get(Key),
}

impl Op {
    /// The key an operation is about (none for a clock move).
    pub fn key(self) -> Option<Key> {
        match self {
            Op::Tick(_) => None,
            Op::Reserve(_, k)
            | Op::Complete(_, k, _)
            | Op::Renew(_, k)
            | Op::Release(_, k)
            | Op::EndLease(_, k)
            | Op::TakeOver(_, k, ..)
            | Op::Resolve(k, _)
            | Op::Get(k) => Some(k),
        }
    }
}

/// The ops of a case: 1 to `max_len`.
pub fn sequences(keys: usize, max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(keys), 1..=max_len)
}

/// Weighted so that short sequences often meet: most operations on the first key, and
/// a proxy that reserved is often the one that renews, completes or releases next
/// (uniform choices spread 24 operations too thin for 32 cases to find a fence's gap).
fn op(keys: usize) -> impl Strategy<Value = Op> {
    let proxy = prop_oneof![
        3 => Just(Proxy::A),
        2 => Just(Proxy::B),
        1 => Just(Proxy::C),
    ];
    let key = prop_oneof![3 => Just(0), 1 => 0..keys];
    let seen = prop_oneof![
        3 => Just(Seen::Current),
        2 => proxy.clone().prop_map(Seen::Proxy),
        1 => Just(Seen::Operator),
    ];
    let window = prop_oneof![Just(None), (1u8..=6).prop_map(Some)];
    let resolution = prop_oneof![
        Just(Resolution::NotExecuted),
        any::<bool>().prop_map(|ok| Resolution::Completed { ok }),
    ];
    prop_oneof![
        5 => (1u8..=3).prop_map(Op::Tick),
        5 => (proxy.clone(), key.clone()).prop_map(|(p, k)| Op::Reserve(p, k)),
        3 => (proxy.clone(), key.clone(), any::<bool>()).prop_map(|(p, k, ok)| Op::Complete(p, k, ok)),
        3 => (proxy.clone(), key.clone()).prop_map(|(p, k)| Op::Renew(p, k)),
        2 => (proxy.clone(), key.clone()).prop_map(|(p, k)| Op::Release(p, k)),
        2 => (proxy.clone(), key.clone()).prop_map(|(p, k)| Op::EndLease(p, k)),
        4 => (proxy, key.clone(), seen, window).prop_map(|(p, k, s, w)| Op::TakeOver(p, k, s, w)),
        2 => (key.clone(), resolution).prop_map(|(k, r)| Op::Resolve(k, r)),
        1 => key.prop_map(Op::Get),
    ]
}

/// `k1`, `k2`.
pub fn key_name(key: Key) -> String {
    format!("k{}", key + 1)
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = |key: &Key| key_name(*key);
        match self {
            Op::Tick(n) => write!(f, "clock +{n}"),
            Op::Reserve(p, key) => write!(f, "{} reserves {}", p.name(), k(key)),
            Op::Complete(p, key, ok) => {
                let what = if *ok { "success" } else { "failure" };
                write!(f, "{} completes {} ({what})", p.name(), k(key))
            }
            Op::Renew(p, key) => write!(f, "{} renews {}", p.name(), k(key)),
            Op::Release(p, key) => write!(f, "{} releases {}", p.name(), k(key)),
            Op::EndLease(p, key) => write!(f, "{} ends its lease on {}", p.name(), k(key)),
            Op::TakeOver(p, key, seen, window) => {
                let whose = match seen {
                    Seen::Current => "the stored attempt".to_owned(),
                    Seen::Proxy(q) => format!("{}'s attempt", q.name()),
                    Seen::Operator => "the operator's attempt".to_owned(),
                };
                write!(f, "{} takes over {whose} on {}", p.name(), k(key))?;
                match window {
                    Some(w) => write!(f, " (key window {w} ticks)"),
                    None => write!(f, " (no key window)"),
                }
            }
            Op::Resolve(key, Resolution::NotExecuted) => {
                write!(f, "operator resolves {} as not executed", k(key))
            }
            Op::Resolve(key, Resolution::Completed { ok }) => {
                let what = if *ok { "a success" } else { "a failure" };
                write!(f, "operator resolves {} as completed ({what})", k(key))
            }
            Op::Get(key) => write!(f, "get {}", k(key)),
        }
    }
}
