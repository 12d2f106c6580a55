//! Where a record is in its life, on the store's clock: the one classification the
//! admin's listing, counts, resolutions and views all read (SPEC §1 "Unknown outcomes").

use super::{Record, Settled};

/// A record's phase at a time of the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// In progress, its lease live: its owner is still at it.
    InFlight,
    /// In progress, its lease ended without an outcome, and nobody settled it.
    Unknown,
    /// Resolved as not executed: the next repeat forwards it.
    NotExecuted,
    /// Its outcome is recorded.
    Completed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::InFlight => "in_flight",
            Phase::Unknown => "unknown",
            Phase::NotExecuted => "not_executed",
            Phase::Completed => "completed",
        }
    }
}

impl Record {
    /// This record's phase at `now_ms` on the store's clock.
    pub fn phase(&self, now_ms: u64) -> Phase {
        match (self.is_completed(), self.settled, self.lease_ended(now_ms)) {
            (true, _, _) => Phase::Completed,
            (false, Some(Settled::NotExecuted), _) => Phase::NotExecuted,
            (false, _, true) => Phase::Unknown,
            (false, _, false) => Phase::InFlight,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::StoredResponse;

    #[test]
    fn each_phase_on_the_store_clock() {
        let r = Record::in_progress("r", "", "k", [0; 32], [0; 32], Duration::from_secs(1));
        let end = r.expires_at_ms;
        assert_eq!(r.phase(end - 1), Phase::InFlight);
        assert_eq!(r.phase(end), Phase::Unknown);
        // Settled as not executed whether or not its (zero) lease has ended: the
        // settlement is read before the lease.
        let settled = r.not_executed();
        assert_eq!(settled.phase(0), Phase::NotExecuted);
        assert_eq!(settled.phase(settled.expires_at_ms), Phase::NotExecuted);
        assert_eq!(settled.phase(u64::MAX), Phase::NotExecuted);
        let response = StoredResponse {
            status: 200,
            headers: vec![],
            body: None,
        };
        let completed = r.completed(response, Duration::ZERO);
        assert_eq!(completed.phase(end), Phase::Completed);
        assert_eq!(completed.phase(u64::MAX), Phase::Completed);
    }
}
