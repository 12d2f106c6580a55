//! Every row of SPEC §1's loser cases (step 4) and outcome classes, without sockets.

use std::time::Duration;

use bytes::Bytes;
use http::Method;

use super::*;
use crate::key::StoreKey;
use crate::policy::{OnAmbiguous, OnFailure, OnUnknown, StatusSet};
use crate::route::tests::policy;
use crate::store::Settled;
use crate::vocabulary::Outcome;

const NOW: u64 = 1_800_000_000_000;

fn route() -> RoutePolicy {
    policy(
        "charge",
        &[Method::POST],
        "/charge/{id}",
        &["charge:{path.id}"],
    )
}

fn intent() -> Intent {
    Intent {
        key: "charge:1".into(),
        scope: String::new(),
        store_key: StoreKey::new("charge", "", "charge:1"),
        fingerprint: [1; 32],
        credentials: [2; 32],
        credentials_plain: None,
    }
}

/// Someone else's reservation of the same intent, `left_ms` before its lease ends.
fn in_progress(left_ms: u64) -> Record {
    let i = intent();
    let mut r = Record::in_progress(
        "charge",
        "",
        &i.key,
        i.fingerprint,
        i.credentials,
        Duration::from_secs(30),
    );
    r.expires_at_ms = NOW + left_ms;
    r
}

fn completed(status: u16, body: Option<&'static str>) -> Record {
    let stored = StoredResponse {
        status,
        headers: vec![],
        body: body.map(|b| Bytes::from_static(b.as_bytes())),
    };
    let mut r = in_progress(0).completed(stored, Duration::from_secs(3600));
    r.expires_at_ms = NOW + 3_600_000;
    r
}

fn mine() -> Token {
    Token::random()
}

fn refused(d: Decision<'_>) -> (u16, String, Outcome) {
    match d {
        Decision::Refuse(r) => {
            let p = r.problem("charge");
            (p.status.as_u16(), p.code.to_string(), r.outcome())
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn completed_same_request_is_replayed() {
    let r = completed(201, Some("{}"));
    let d = decide(&r, &intent(), &mine(), &route(), false, NOW);
    assert!(matches!(d, Decision::Replay { stored, .. } if stored.status == 201));
}

#[test]
fn own_token_is_a_won_reservation_not_a_duplicate() {
    let r = in_progress(30_000);
    assert!(matches!(
        decide(&r, &intent(), &r.token, &route(), false, NOW),
        Decision::Won
    ));
}

#[test]
fn other_credentials_are_refused_before_anything_else_is_told() {
    let mut r = completed(201, Some("{}"));
    r.credentials = [9; 32];
    r.fingerprint = [9; 32];
    let (status, code, outcome) = refused(decide(&r, &intent(), &mine(), &route(), true, NOW));
    assert_eq!((status, code.as_str()), (403, "credential_mismatch"));
    assert_eq!(outcome, Outcome::Rejected);
}

/// With a credential key, a record stored before it (the plain digest) still replays to
/// its caller; a keyed hash of other credentials is still refused.
#[test]
fn a_keyed_caller_matches_its_records_keyed_or_plain() {
    let mut keyed = intent();
    keyed.credentials = [5; 32];
    keyed.credentials_plain = Some([2; 32]);
    let plain = completed(201, Some("{}"));
    let d = decide(&plain, &keyed, &mine(), &route(), false, NOW);
    assert!(matches!(d, Decision::Replay { .. }), "{d:?}");
    let mut r = completed(201, Some("{}"));
    r.credentials = [5; 32];
    let d = decide(&r, &keyed, &mine(), &route(), false, NOW);
    assert!(matches!(d, Decision::Replay { .. }), "{d:?}");
    r.credentials = [9; 32];
    let (status, code, _) = refused(decide(&r, &keyed, &mine(), &route(), false, NOW));
    assert_eq!((status, code.as_str()), (403, "credential_mismatch"));
}

#[test]
fn other_request_under_the_key_is_422_completed_or_in_progress() {
    for mut r in [completed(201, Some("{}")), in_progress(5_000)] {
        r.fingerprint = [9; 32];
        let (status, code, outcome) = refused(decide(&r, &intent(), &mine(), &route(), true, NOW));
        assert_eq!((status, code.as_str()), (422, "idempotency_key_reused"));
        assert_eq!(outcome, Outcome::Mismatch);
    }
}

#[test]
fn in_progress_conflicts_with_retry_after_from_the_lease() {
    let cases = [(2_500, "3"), (30_000, "30"), (1, "1")];
    for (left_ms, retry_after) in cases {
        let r = in_progress(left_ms);
        let Decision::Refuse(refusal) = decide(&r, &intent(), &mine(), &route(), false, NOW) else {
            panic!("conflict expected")
        };
        let (p, outcome) = (refusal.problem("charge"), refusal.outcome());
        assert_eq!((p.status.as_u16(), p.code), (409, "request_in_progress"));
        assert_eq!(outcome, Outcome::Conflict);
        let response = p.into_response();
        assert_eq!(response.headers()["retry-after"], retry_after, "{left_ms}");
    }
}

#[test]
fn in_progress_waits_until_the_lease_ends_at_most_a_second() {
    for (left_ms, nap_ms) in [(200, 205), (30_000, 1_000), (1, 6)] {
        let r = in_progress(left_ms);
        match decide(&r, &intent(), &mine(), &route(), true, NOW) {
            Decision::Wait { nap } => assert_eq!(nap, Duration::from_millis(nap_ms)),
            other => panic!("wait expected, got {other:?}"),
        }
    }
}

#[test]
fn stored_failure_is_replayed_or_retried_per_on_failure() {
    let r = completed(402, Some("declined"));
    assert!(matches!(
        decide(&r, &intent(), &mine(), &route(), false, NOW),
        Decision::Replay { stored, .. } if stored.status == 402
    ));
    let mut retrying = route();
    retrying.on_failure = OnFailure::Retry;
    let d = decide(&r, &intent(), &mine(), &retrying, false, NOW);
    assert!(matches!(d, Decision::NewAttempt));
    // Even when the failure's body was too large to keep.
    let big = completed(400, None);
    let d = decide(&big, &intent(), &mine(), &retrying, false, NOW);
    assert!(matches!(d, Decision::NewAttempt));
}

#[test]
fn successes_are_always_replayed_even_under_on_failure_retry() {
    let mut retrying = route();
    retrying.on_failure = OnFailure::Retry;
    for status in [200, 201, 204, 302] {
        let r = completed(status, Some(""));
        assert!(matches!(
            decide(&r, &intent(), &mine(), &retrying, false, NOW),
            Decision::Replay { .. }
        ));
    }
}

#[test]
fn completed_without_its_body_is_409_naming_the_status_never_a_rerun() {
    let r = completed(200, None);
    let (status, code, outcome) = refused(decide(&r, &intent(), &mine(), &route(), true, NOW));
    assert_eq!((status, code.as_str()), (409, "response_not_stored"));
    assert_eq!(outcome, Outcome::Conflict);
}

#[test]
fn outcome_classes() {
    let p = route();
    for status in [200, 201, 204, 400, 402, 404, 422] {
        assert_eq!(
            settle(Exchanged::Answered(status), &p),
            Settle::Store,
            "{status}"
        );
    }
    for status in [500, 502, 503, 504, 401, 403, 407, 408, 409, 425, 429] {
        assert_eq!(
            settle(Exchanged::Answered(status), &p),
            Settle::Release,
            "{status}"
        );
    }
    assert_eq!(settle(Exchanged::NotSent, &p), Settle::Release);
    // An MCP answer that is not the call's outcome (input_required, an HTTP error).
    assert_eq!(settle(Exchanged::NotFinal, &p), Settle::Release);
    assert_eq!(settle(Exchanged::Withheld, &p), Settle::Release);
    assert_eq!(settle(Exchanged::Ambiguous, &p), Settle::Hold);
    let mut releasing = route();
    releasing.on_ambiguous = OnAmbiguous::Release;
    assert_eq!(settle(Exchanged::Ambiguous, &releasing), Settle::Release);
}

#[test]
fn store_statuses_choose_what_is_stored_but_never_the_transient_four() {
    let mut p = route();
    p.store_statuses = StatusSet {
        classes: [false, false, true, false, false, true],
        codes: vec![409, 404],
    };
    assert_eq!(settle(Exchanged::Answered(503), &p), Settle::Store);
    assert_eq!(settle(Exchanged::Answered(404), &p), Settle::Store);
    assert_eq!(settle(Exchanged::Answered(402), &p), Settle::Release);
    assert_eq!(settle(Exchanged::Answered(409), &p), Settle::Release);
}

/// An attempt whose lease ended `ago_ms` before `NOW`, first sent `sent_ago_ms` before.
fn unknown(ago_ms: u64, sent_ago_ms: u64) -> Record {
    let mut r = in_progress(0);
    r.expires_at_ms = NOW - ago_ms;
    r.sent_at_ms = NOW - sent_ago_ms;
    r
}

#[test]
fn unknown_outcome_follows_on_unknown() {
    let mut route = route();
    // retry (the default), no window: forward again, however old.
    let r = unknown(0, 7 * 24 * 3_600_000);
    assert!(matches!(
        decide(&r, &intent(), &mine(), &route, false, NOW),
        Decision::Retry
    ));
    // A waiting duplicate does not wait for an attempt nobody holds.
    assert!(matches!(
        decide(&r, &intent(), &mine(), &route, true, NOW),
        Decision::Retry
    ));
    // retry within the window less a lease (the retried call may leave up to a lease
    // after the takeover), then as hold past it (measured from the first send).
    route.upstream_key_window = Some(Duration::from_secs(3_600) + route.lease);
    let fresh = unknown(1, 3_599_999);
    assert!(matches!(
        decide(&fresh, &intent(), &mine(), &route, false, NOW),
        Decision::Retry
    ));
    let old = unknown(1, 3_600_000);
    let (status, code, outcome) = refused(decide(&old, &intent(), &mine(), &route, false, NOW));
    assert_eq!(
        (status, code.as_str(), outcome),
        (409, "outcome_unknown", Outcome::Conflict)
    );
    // reconcile: ask first.
    route.on_unknown = OnUnknown::Reconcile;
    assert!(matches!(
        decide(&fresh, &intent(), &mine(), &route, false, NOW),
        Decision::Reconcile
    ));
    // hold: 409 without Retry-After, until a person settles it.
    route.on_unknown = OnUnknown::Hold;
    let Decision::Refuse(refusal) = decide(&fresh, &intent(), &mine(), &route, false, NOW) else {
        panic!("hold refuses")
    };
    let p = refusal.problem("charge");
    assert_eq!(p.code, "outcome_unknown");
    assert!(p.into_response().headers().get("retry-after").is_none());
    // Settled as not executed by an operator: forwarded again whatever the route says.
    let mut settled = fresh.clone();
    settled.settled = Some(Settled::NotExecuted);
    assert!(matches!(
        decide(&settled, &intent(), &mine(), &route, false, NOW),
        Decision::Retry
    ));
}

#[test]
fn an_unknown_outcome_is_still_checked_for_credentials_and_payload() {
    let mut route = route();
    route.on_unknown = OnUnknown::Hold;
    let mut r = unknown(1, 1);
    r.credentials = [8; 32];
    let (status, code, _) = refused(decide(&r, &intent(), &mine(), &route, false, NOW));
    assert_eq!((status, code.as_str()), (403, "credential_mismatch"));
    let mut r = unknown(1, 1);
    r.fingerprint = [8; 32];
    let (status, code, _) = refused(decide(&r, &intent(), &mine(), &route, false, NOW));
    assert_eq!((status, code.as_str()), (422, "idempotency_key_reused"));
}
