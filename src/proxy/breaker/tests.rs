use super::*;
use crate::metrics::Metrics;

fn breaker(after: u32, cool_down_secs: u64) -> (Arc<Breaker>, RouteBreakerMetrics) {
    let metrics = Metrics::new().breakers.route("charge");
    let policy = BreakerPolicy {
        after,
        cool_down: Duration::from_secs(cool_down_secs),
    };
    (Arc::new(Breaker::new(policy, metrics.clone())), metrics)
}

fn fail(b: &Arc<Breaker>, now: Instant) {
    let mut ticket = b.admit_at(now).expect("admitted");
    ticket.reported = true;
    b.record(ticket.probe, false, now);
}

#[test]
fn opens_after_consecutive_unanswered_calls_only() {
    let (b, m) = breaker(3, 10);
    let t0 = Instant::now();
    fail(&b, t0);
    fail(&b, t0);
    // An answer in between starts the count over.
    let ticket = b.admit_at(t0).unwrap();
    b.record(ticket.probe, true, t0);
    fail(&b, t0);
    fail(&b, t0);
    assert!(
        b.admit_at(t0).is_ok(),
        "two in a row after an answer: still closed"
    );
    assert_eq!(m.open.get(), 0);
    fail(&b, t0);
    assert_eq!(b.admit_at(t0).err(), Some(Duration::from_secs(10)));
    assert_eq!(m.open.get(), 1);
    assert_eq!(m.trips.get(), 1);
    let later = t0 + Duration::from_secs(4);
    assert_eq!(b.admit_at(later).err(), Some(Duration::from_secs(6)));
}

#[test]
fn one_probe_after_the_cool_down_closes_or_reopens_it() {
    let (b, m) = breaker(1, 10);
    let t0 = Instant::now();
    fail(&b, t0);
    let t1 = t0 + Duration::from_secs(10);
    let probe = b.admit_at(t1).expect("the probe");
    assert!(probe.probe);
    assert_eq!(
        b.admit_at(t1).err(),
        Some(PROBE_PENDING_RETRY),
        "one probe at a time"
    );
    // It fails: open for another cool-down, counted as a trip.
    let mut probe = probe;
    probe.reported = true;
    b.record(true, false, t1);
    assert_eq!(b.admit_at(t1).err(), Some(Duration::from_secs(10)));
    assert_eq!(m.trips.get(), 2);
    // The next probe succeeds: closed, everything passes.
    let t2 = t1 + Duration::from_secs(10);
    let mut probe = b.admit_at(t2).expect("the second probe");
    probe.reported = true;
    b.record(true, true, t2);
    assert_eq!(m.open.get(), 0);
    let ticket = b.admit_at(t2).expect("closed");
    assert!(!ticket.probe);
}

#[test]
fn a_probe_that_never_reached_the_upstream_hands_over_its_turn() {
    let (b, _) = breaker(1, 10);
    let t0 = Instant::now();
    fail(&b, t0);
    let t1 = t0 + Duration::from_secs(11);
    drop(b.admit_at(t1).expect("the probe"));
    let next = b.admit_at(t1).expect("the next intent probes");
    assert!(next.probe);
}

#[test]
fn calls_sent_before_it_opened_do_not_move_it() {
    let (b, _) = breaker(2, 10);
    let t0 = Instant::now();
    let early = b.admit_at(t0).unwrap();
    fail(&b, t0);
    fail(&b, t0);
    let mut early = early;
    early.reported = true;
    b.record(early.probe, true, t0);
    assert!(
        b.admit_at(t0).is_err(),
        "a late answer does not close an open breaker"
    );
}
