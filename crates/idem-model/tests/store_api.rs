//! `ModelStore`, the public reference for a model-based test of the real stores: its
//! answers under each operation, on its own clock.

use idem_model::{ModelStore, Outcome, Record, Reserved, Resolution, Settled};

const OK: Outcome = Outcome {
    id: 1,
    attempt: 1,
    ok: true,
};

#[test]
fn reserve_wins_once_and_answers_the_record_with_the_store_clock() {
    let mut store = ModelStore::new(3);
    store.advance_clock(5);
    assert_eq!(store.reserve(1), Reserved::Won);
    let record = store.record().unwrap();
    assert_eq!(
        record,
        Record::InProgress {
            token: 1,
            lease_end: 8,
            sent_at: 5,
            attempt: 1,
            settled: None
        }
    );
    store.advance_clock(1);
    assert_eq!(store.reserve(2), Reserved::Exists { record, now: 6 });
}

#[test]
fn a_live_lease_is_renewed_by_its_owner_only_and_never_taken_over() {
    let mut store = ModelStore::new(3);
    store.reserve(1);
    assert!(!store.renew(2));
    store.advance_clock(2);
    assert!(store.renew(1));
    store.advance_clock(2);
    assert!(!store.take_over(1, 2, None), "lease ends at 5, clock 4");
    store.advance_clock(1);
    assert!(!store.take_over(9, 2, None), "another token");
    assert!(store.take_over(1, 2, None));
    assert!(!store.complete(1, OK), "the old owner is fenced");
    assert!(store.complete(2, OK));
    assert_eq!(store.record().unwrap().outcome(), Some(OK));
}

#[test]
fn a_lease_that_ended_is_not_renewed_even_by_its_owner() {
    let mut store = ModelStore::new(2);
    store.reserve(1);
    store.advance_clock(2);
    assert!(!store.renew(1), "lease ended at 2, clock 2");
    assert!(store.record().unwrap().lease_ended(2));
    assert!(store.complete(1, OK), "the owner's completion still lands");
}

#[test]
fn a_takeover_keeps_the_attempt_and_checks_the_key_window() {
    let mut store = ModelStore::new(2);
    store.reserve(1);
    store.advance_clock(3);
    assert!(
        !store.take_over(1, 2, Some(3)),
        "3 - 0 is not within a window of 3"
    );
    assert!(store.take_over(1, 2, Some(4)));
    let Some(Record::InProgress {
        sent_at, lease_end, ..
    }) = store.record()
    else {
        panic!()
    };
    assert_eq!((sent_at, lease_end), (0, 5));
}

#[test]
fn resolve_and_reconcile_are_fenced_like_a_takeover() {
    let mut store = ModelStore::new(2);
    store.reserve(1);
    assert!(!store.resolve(1, 2, Resolution::NotExecuted), "lease live");
    store.advance_clock(2);
    assert!(
        !store.resolve(7, 2, Resolution::NotExecuted),
        "not the attempt read"
    );
    assert!(store.resolve(1, 2, Resolution::NotExecuted));
    let record = store.record().unwrap();
    assert!(
        record.lease_ended(store.clock()),
        "the next repeat takes it over"
    );
    assert!(store.reconcile(2, 3, OK));
    assert!(matches!(
        store.record(),
        Some(Record::Completed {
            settled: Some(Settled::Reconciled),
            ..
        })
    ));
    assert!(
        !store.resolve(3, 4, Resolution::Completed(OK)),
        "completed: nothing to resolve"
    );
}

#[test]
fn release_end_lease_and_new_attempt() {
    let mut store = ModelStore::new(2);
    store.reserve(1);
    assert!(!store.release(2));
    assert!(store.end_lease(1));
    assert!(store.record().unwrap().lease_ended(0));
    assert!(store.release(1));
    assert_eq!(store.record(), None);
    store.reserve(3);
    let failed = Outcome {
        id: 1,
        attempt: 1,
        ok: false,
    };
    assert!(store.complete(3, failed));
    assert!(!store.new_attempt(9, 4));
    assert!(store.new_attempt(3, 4));
    assert_eq!(store.record().unwrap().attempt(), 2);
}
