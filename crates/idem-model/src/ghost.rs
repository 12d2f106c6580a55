//! What callers received, recorded for the properties: a caller's answer is checked
//! against what was acknowledged before and, for a replay, against what the upstream
//! actually answered.

use crate::config::Config;
use crate::record::{Outcome, Record};
use crate::state::State;

/// Whether `later` may follow `earlier` as the intent's acknowledged outcome: the same
/// outcome, or a new attempt after a stored failure under `on_failure: retry`.
pub fn supersedes(config: &Config, earlier: Outcome, later: Outcome) -> bool {
    later == earlier || (config.on_failure_retry && !earlier.ok && later.attempt > earlier.attempt)
}

impl State {
    /// A caller receives `outcome`, first hand (`replay` false: the answer streamed
    /// from the upstream) or replayed from the store. `acked` keeps the latest in the
    /// order of [`supersedes`].
    pub(crate) fn deliver(&mut self, config: &Config, outcome: Outcome, replay: bool) {
        if replay {
            self.ghost.replayed = true;
            if !self.upstream.gave(outcome) {
                self.ghost.bad_replay = true;
            }
        }
        match self.ghost.acked {
            Some(earlier) if !supersedes(config, earlier, outcome) => {
                // A stale owner's caller may still get its own, older answer first hand
                // (a failure a later attempt replaced): that is its call's truth. A
                // replay, or any unrelated outcome, contradicts what was acknowledged.
                let older = !replay && supersedes(config, outcome, earlier);
                if !older {
                    self.ghost.contradicted = true;
                }
            }
            _ => self.ghost.acked = Some(outcome),
        }
    }

    /// Whether the store still answers the last acknowledged outcome to a repeat, or
    /// may yet (an attempt in progress or unknown, which is settled from the upstream's
    /// records). False when it was lost: the record is gone (a repeat would execute
    /// again as a fresh intent) or completed with an outcome that contradicts it.
    pub fn acked_kept(&self, config: &Config) -> bool {
        let Some(acked) = self.ghost.acked else {
            return true;
        };
        match self.store.record() {
            None => false,
            Some(Record::InProgress { .. }) => true,
            Some(Record::Completed { outcome, .. }) => supersedes(config, acked, outcome),
        }
    }
}
