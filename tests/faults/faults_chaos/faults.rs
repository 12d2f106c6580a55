//! The fault schedule of the chaos test: which Redis fault, when and for how long,
//! from a seeded generator so that a run can be replayed (`IDEM_CHAOS_SEED`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::faulty::{Fault, FaultyProxy};
use crate::support::redis::RedisServer;

/// A tiny deterministic PRNG (xorshift), seeded per run and printed, so a failing run
/// can be replayed with `IDEM_CHAOS_SEED`.
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The faults, each injected once per round of four.
pub const FAULT_KINDS: [&str; 4] = ["pause", "hold", "delay", "reset"];

/// Injects faults until `stop`, each kind once per round of four in a random order,
/// with random gaps and lengths; returns how many of each kind it injected.
pub async fn inject_faults(
    mut rng: Rng,
    link: Arc<FaultyProxy>,
    redis: Arc<RedisServer>,
    stop: Arc<AtomicBool>,
    fault_log: Arc<Mutex<Vec<String>>>,
    run_start: Instant,
) -> HashMap<&'static str, usize> {
    let mut injected: HashMap<&'static str, usize> = FAULT_KINDS.iter().map(|k| (*k, 0)).collect();
    let mut round = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        if round.is_empty() {
            round = FAULT_KINDS.to_vec();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
        let hold = Duration::from_millis(200 + rng.below(700));
        let kind = round.pop().unwrap();
        *injected.get_mut(kind).unwrap() += 1;
        fault_log.lock().unwrap().push(format!(
            "@{}ms {kind} {hold:?}",
            run_start.elapsed().as_millis()
        ));
        match kind {
            "pause" => {
                redis.pause();
                tokio::time::sleep(hold).await;
                redis.resume();
            }
            "hold" => {
                link.set(Fault::Hold);
                tokio::time::sleep(hold).await;
                link.set(Fault::Pass);
            }
            "delay" => {
                link.set(Fault::Delay(Duration::from_millis(400)));
                tokio::time::sleep(hold).await;
                link.set(Fault::Pass);
            }
            _ => link.reset_open().await,
        }
    }
    injected
}
