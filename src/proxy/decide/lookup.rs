//! What a reconciliation lookup's answer says about an attempt whose outcome was
//! unknown (SPEC §1 "Unknown outcomes", `reconcile:`): a pure rule, beside
//! [`super::settle`], so the exchange only sends and reads.
//!
//! The status decides first: not a `found` status means absent (when `absent` lists it)
//! or no verdict, without reading the body. A `found` status needs the body read whole,
//! then `found_json` decides whether the attempt is really in it: a search's empty 200 is
//! not "found".

use crate::policy::{Found, Reconcile};
use crate::store::StoredResponse;

/// What a reconciliation lookup said about an attempt.
#[derive(Debug)]
pub enum Lookup {
    /// It happened: this answer is the outcome.
    Found(StoredResponse),
    /// It never happened.
    Absent,
    /// No answer that says either (another status, timeout, refused, a broken body).
    Failed(String),
}

/// The verdict of a lookup answered with `status` before its body is read; `None` when
/// the status is a `found` one and the body must be read ([`lookup_read`]).
pub fn lookup_status(reconcile: &Reconcile, status: u16) -> Option<Lookup> {
    if reconcile.found.contains(&status) {
        return None;
    }
    Some(match reconcile.absent.contains(&status) {
        true => Lookup::Absent,
        false => Lookup::Failed(format!("the lookup answered {status}")),
    })
}

/// The verdict of a lookup answered with a `found` `status`, once its body was read:
/// `read` is the answer as it would be stored, or why it broke off.
pub fn lookup_read(
    reconcile: &Reconcile,
    status: u16,
    read: Result<StoredResponse, String>,
) -> Lookup {
    let stored = match read {
        Ok(stored) => stored,
        Err(reason) => return Lookup::Failed(format!("the lookup's answer broke off: {reason}")),
    };
    match reconcile.read_found(stored.body.as_deref()) {
        Found::Yes => Lookup::Found(stored),
        Found::Empty if reconcile.absent.contains(&status) => Lookup::Absent,
        Found::Empty => Lookup::Failed(format!(
            "the lookup answered {status} without the attempt at found_json"
        )),
        Found::Unreadable(why) => Lookup::Failed(format!("found_json: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn reconcile(found_json: Option<&str>) -> Reconcile {
        let path = "/v1/charges/search?key={key}";
        Reconcile::for_test(path, &[200], &[200, 404], found_json)
    }

    fn answer(body: &str) -> Result<StoredResponse, String> {
        Ok(StoredResponse {
            status: 200,
            headers: Vec::new(),
            body: Some(Bytes::from(body.to_owned())),
        })
    }

    #[test]
    fn the_status_decides_first() {
        let r = reconcile(None);
        assert!(
            lookup_status(&r, 200).is_none(),
            "a found status reads the body"
        );
        assert!(matches!(lookup_status(&r, 404), Some(Lookup::Absent)));
        assert!(matches!(lookup_status(&r, 500), Some(Lookup::Failed(_))));
    }

    #[test]
    fn an_empty_search_is_absent_not_found() {
        let r = reconcile(Some("/data/0"));
        assert!(matches!(
            lookup_read(&r, 200, answer(r#"{"data":[]}"#)),
            Lookup::Absent
        ));
        let found = lookup_read(&r, 200, answer(r#"{"data":[{"id":"ch_1"}]}"#));
        assert!(matches!(found, Lookup::Found(_)));
        assert!(matches!(
            lookup_read(&r, 200, answer("not json")),
            Lookup::Failed(_)
        ));
    }

    #[test]
    fn a_broken_answer_says_nothing() {
        let r = reconcile(None);
        let broke = lookup_read(&r, 200, Err("reset".to_owned()));
        assert!(matches!(broke, Lookup::Failed(reason) if reason.contains("reset")));
    }
}
