//! Readiness refuses a Redis that may evict records (SPEC §1 "What the code enforces").
//! Every [`CHECK_EVERY`] (the first at once) the masters' `maxmemory-policy` is read
//! (`store/redis/eviction.rs`): unless each is `noeviction`, `/readyz` answers 503 naming
//! the policy and the fix, and the log says so once per change. Fixed on the server, it
//! turns ready again by itself at the next check; a failover to a master configured
//! differently is caught the same way. `store.redis.allow_eviction: true` serves anyway,
//! with a warning and `idem_store_evicting` at 1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::records::any_store;
use super::Admin;
use crate::store::redis::NodePolicy;

/// How often the policy is read again.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(5);

/// What the last check found; read by `/readyz`.
pub struct EvictionCheck {
    allow: bool,
    /// Why the store is not fit to serve; `None` once it is (or not Redis).
    refusal: Mutex<Option<String>>,
    /// Whether any check has read the policies yet.
    read: AtomicBool,
    /// Whether `allow_eviction`'s warning was logged for the current policies.
    warned: AtomicBool,
}

impl EvictionCheck {
    /// For a Redis store (`allow`: `allow_eviction`): not ready until the first read.
    pub fn redis(allow: bool) -> EvictionCheck {
        let first = "the Redis maxmemory-policy has not been read yet".to_owned();
        EvictionCheck {
            allow,
            refusal: Mutex::new((!allow).then_some(first)),
            read: AtomicBool::new(false),
            warned: AtomicBool::new(false),
        }
    }

    /// For the stores that never evict what they hold in flight.
    pub fn none() -> EvictionCheck {
        EvictionCheck {
            allow: true,
            refusal: Mutex::new(None),
            read: AtomicBool::new(true),
            warned: AtomicBool::new(false),
        }
    }

    fn set(&self, refusal: Option<String>) {
        let mut current = lock(&self.refusal);
        if *current != refusal {
            match &refusal {
                Some(why) => tracing::error!("not ready: {why}"),
                None => tracing::info!("ready: every Redis master keeps records until their TTL (maxmemory-policy noeviction)"),
            }
        }
        *current = refusal;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why `/readyz` must say 503, if it must. Before the first check has read the
/// policies, the probe reads them itself (again until `budget` is spent, as it pings),
/// so readiness is never reported on a guess.
pub(super) async fn refusal(admin: &Admin, budget: Duration) -> Option<String> {
    let deadline = tokio::time::Instant::now() + budget;
    while !admin.eviction.read.load(Ordering::Acquire) {
        if !check_once(admin).await {
            break;
        }
        let again = tokio::time::Instant::now() + Duration::from_millis(25);
        if admin.eviction.read.load(Ordering::Acquire) || again >= deadline {
            break;
        }
        tokio::time::sleep_until(again).await;
    }
    lock(&admin.eviction.refusal).clone()
}

/// What to say about `policies`: `None` when every master keeps its records.
fn judge(policies: &[NodePolicy]) -> Option<String> {
    let evicting: Vec<String> = policies
        .iter()
        .filter(|p| !p.keeps_records())
        .map(|p| format!("{} has maxmemory-policy {}", p.node, p.policy))
        .collect();
    (!evicting.is_empty()).then(|| {
        format!(
            "Redis may evict idem's records while their calls run ({}), and an evicted \
             record lets a repeat run its call again. Set maxmemory-policy noeviction on \
             every master (CONFIG SET maxmemory-policy noeviction, or the managed service's \
             parameter group; docs/redis.md), or store.redis.allow_eviction: true to serve \
             anyway",
            evicting.join(", ")
        )
    })
}

/// Checks every `every` until aborted (or at once for a store that never evicts).
pub(super) async fn keep_checking(admin: Arc<Admin>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !check_once(&admin).await {
            return;
        }
    }
}

/// Reads the policies once and records the verdict; `false` when the store is not
/// Redis (nothing to check, ever).
async fn check_once(admin: &Admin) -> bool {
    let check = &admin.eviction;
    let policies = match any_store(&admin.stores, |s| s.eviction_policies()).await {
        Ok((Some(policies), _)) => policies,
        Ok((None, _)) => return false,
        Err(e) => {
            // A store that does not answer is the ping's concern; only a policy never
            // read (INFO denied, say) keeps readiness off on its own.
            if !check.read.load(Ordering::Acquire) && !check.allow {
                let hint = match e.to_string().contains("NOPERM") {
                    true => "; the ACL user needs +info",
                    false => "",
                };
                check.set(Some(format!(
                    "cannot read the Redis maxmemory-policy yet ({e}){hint}"
                )));
            }
            return true;
        }
    };
    let verdict = judge(&policies);
    let metrics = admin.control.metrics();
    metrics
        .guards
        .store_evicting
        .set(i64::from(verdict.is_some()));
    match (verdict, check.allow) {
        (Some(why), true) => {
            if !check.warned.swap(true, Ordering::AcqRel) {
                tracing::warn!("serving anyway (store.redis.allow_eviction: true): {why}");
            }
        }
        (verdict, _) => {
            check.warned.store(false, Ordering::Release);
            check.set(verdict);
        }
    }
    check.read.store(true, Ordering::Release);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_on_every_master_is_fit() {
        let node = |n: &str, p: &str| NodePolicy {
            node: n.into(),
            policy: p.into(),
        };
        assert_eq!(
            judge(&[node("a", "noeviction"), node("b", "noeviction")]),
            None
        );
        let why = judge(&[node("a", "noeviction"), node("b", "volatile-lru")]).expect("refused");
        assert!(why.contains("b has maxmemory-policy volatile-lru"), "{why}");
        assert!(why.contains("maxmemory-policy noeviction"), "{why}");
        assert!(!why.contains("a has"), "{why}");
    }
}
