use std::time::Duration;

use super::*;

const K: StoreKey = StoreKey([7; 32]);

fn record() -> Record {
    Record::in_progress("r", "", "k", [1; 32], [2; 32], Duration::from_secs(30))
}

fn completed(r: &Record) -> Record {
    let response = crate::store::StoredResponse {
        status: 201,
        headers: vec![],
        body: Some(bytes::Bytes::from_static(b"{}")),
    };
    r.completed(response, Duration::from_secs(60))
}

fn lead(local: &Local) -> Leader {
    match local.lookup(&K) {
        Coalesce::Lead(l) => l,
        _ => panic!("expected to lead"),
    }
}

#[tokio::test]
async fn followers_take_the_leaders_outcome_and_duplicates_then_know_the_owner() {
    let local = Local::default();
    let leader = lead(&local);
    let Coalesce::Follow(mut rx) = local.lookup(&K) else {
        panic!("second arrival follows")
    };
    let mine = record();
    leader.won(&mine);
    let seen = rx.wait_for(Option::is_some).await.unwrap().clone();
    assert_eq!(seen.unwrap().unwrap().0, mine);
    let Coalesce::Known((owner, now)) = local.lookup(&K) else {
        panic!("owned key known locally")
    };
    assert_eq!(owner, mine);
    assert!(
        !owner.lease_ended(now),
        "judged live at the time it is answered with"
    );
    // Completion with duplicates seen: kept for the stragglers.
    local.written(&K, &mine.token, &completed(&mine));
    assert!(matches!(local.lookup(&K), Coalesce::Known((r, _)) if r.is_completed()));
}

#[tokio::test]
async fn a_cancelled_leader_lets_followers_go_to_redis() {
    let local = Local::default();
    let leader = lead(&local);
    let Coalesce::Follow(mut rx) = local.lookup(&K) else {
        panic!("follows")
    };
    drop(leader);
    assert!(rx.wait_for(Option::is_some).await.is_err());
    assert!(
        matches!(local.lookup(&K), Coalesce::Lead(_)),
        "entry removed"
    );
}

#[test]
fn without_duplicates_nothing_stays_after_completion() {
    let local = Local::default();
    let mine = record();
    lead(&local).won(&mine);
    local.written(&K, &mine.token, &mine.renewed(Duration::from_secs(30)));
    local.written(&K, &mine.token, &completed(&mine));
    assert_eq!(local.len(), 0);
}

#[test]
fn an_owned_entry_past_its_lease_is_not_trusted() {
    let local = Local::default();
    let mut mine = record();
    // Past its lease by the monotonic clock, whatever the wall clock says.
    mine.expires_at_ms = u64::MAX;
    mine.stamp = Some(crate::store::Stamp {
        lease: Duration::ZERO,
        sent: true,
    });
    lead(&local).won(&mine);
    assert!(matches!(local.lookup(&K), Coalesce::Lead(_)));
}

#[test]
fn someone_elses_in_progress_record_is_not_kept_but_forget_drops_completed() {
    let local = Local::default();
    let theirs = record();
    lead(&local).exists(&theirs, 0);
    assert_eq!(local.len(), 0);
    let leader = lead(&local);
    let _follower = local.lookup(&K);
    leader.exists(&completed(&theirs), 0);
    assert!(matches!(local.lookup(&K), Coalesce::Known(_)));
    local.forget(&K);
    assert!(matches!(local.lookup(&K), Coalesce::Lead(_)));
}

/// The lost wake-up of the three-replica soak: a completion published while a
/// reservation's read is under way. A duplicate arriving after it registered its watch
/// too late to hear of that completion, so it must not take the (stale) shared read.
#[tokio::test]
async fn after_an_event_about_the_key_later_arrivals_read_for_themselves() {
    let local = Local::default();
    let leader = lead(&local);
    let Coalesce::Follow(_early) = local.lookup(&K) else {
        panic!("an arrival before the event follows")
    };
    local.changed(&K);
    assert!(
        matches!(local.lookup(&K), Coalesce::Alone),
        "an arrival after the event reads Redis itself"
    );
    // The leader still settles its entry for those who followed before the event.
    leader.exists(&record(), 0);
    assert!(matches!(local.lookup(&K), Coalesce::Lead(_)));
}

/// A takeover's record carries the store's first send and this proxy's estimate of its
/// lease's end: a duplicate answered from it would be judged at a time on the proxy's
/// clock (`Coalesce::Known`) and see the first send off by the proxy's skew (the key
/// window misjudged). Duplicates after a takeover ask Redis instead.
#[test]
fn after_a_takeover_duplicates_ask_redis() {
    let local = Local::default();
    let theirs = record();
    lead(&local).exists(&theirs, 1_000);
    // The attempt taken over as the store holds it: first sent an hour before this
    // proxy's clock says (its clock runs an hour ahead of the store's).
    let mut read = theirs.clone();
    read.sent_at_ms = crate::store::record::now_ms() - 3_600_000;
    let ours = read.retried(Duration::from_secs(30));
    local.written(&K, &theirs.token, &ours);
    assert!(
        matches!(local.lookup(&K), Coalesce::Lead(_)),
        "a duplicate after our takeover goes to Redis"
    );
}
