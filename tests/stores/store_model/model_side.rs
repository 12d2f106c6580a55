//! An operation applied to the model's store ([`idem_model::ModelStore`]), with the
//! model's books of who holds which attempt.

use idem_model::fence::Write;
use idem_model::{Outcome, Record, Reserved, Resolution as ModelResolution, Settled, Token};

use super::ops::{Op, Proxy, Resolution, Seen};
use super::view::{of_model, Answer};
use super::world::{ModelAttempt, World, OPERATOR_OUTCOME};

/// A token no one was issued: what a takeover "read" when there was nothing to read.
const NOBODY: Token = 0;
/// The attempt a proxy writes with when it holds none on the key (it completed or
/// released it, or never won one): a token no one holds, which every fence refuses.
const STRANGER: ModelAttempt = ModelAttempt {
    token: NOBODY,
    attempt: 1,
};

impl World<'_> {
    /// Applies `op` (not a clock move) to the model; `issued` is the token a
    /// reservation, takeover or resolution writes, and its name.
    pub fn on_model(&mut self, op: Op, issued: Option<&(String, Token)>) -> Answer {
        let now = self.clock.now();
        let token = issued.map_or(NOBODY, |(_, t)| *t);
        if let Some((name, t)) = issued {
            self.names.model_token(name, *t);
        }
        match op {
            Op::Tick(_) => unreachable!("clock moves are not operations"),
            Op::Reserve(p, k) => match self.model[k].reserve(token) {
                Reserved::Won => {
                    self.hold(p, k, token);
                    Answer::Won
                }
                Reserved::Exists { record, now } => {
                    Answer::Exists(of_model(Some(record), now, &self.names))
                }
            },
            Op::Complete(p, k, ok) => {
                let mine = self.model_attempts[p.index()][k].take().unwrap_or(STRANGER);
                let outcome = Outcome {
                    id: p.index() as u8 + 1,
                    attempt: mine.attempt,
                    ok,
                };
                Answer::Done(self.model[k].complete(mine.token, outcome))
            }
            Op::Renew(p, k) => {
                let mine = self.model_attempts[p.index()][k].unwrap_or(STRANGER);
                Answer::Done(self.model[k].renew(mine.token))
            }
            Op::Release(p, k) => {
                let mine = self.model_attempts[p.index()][k].take().unwrap_or(STRANGER);
                Answer::Done(self.model[k].release(mine.token))
            }
            Op::EndLease(p, k) => {
                let mine = self.model_attempts[p.index()][k].unwrap_or(STRANGER);
                Answer::Done(self.model[k].end_lease(mine.token))
            }
            Op::TakeOver(p, k, seen, window) => {
                let seen = self.model_seen(k, seen);
                let window = window.map(u64::from);
                let taken = self.model[k].take_over(seen, token, window);
                if taken {
                    self.hold(p, k, token);
                }
                Answer::Done(taken)
            }
            Op::Resolve(k, resolution) => self.model_resolve(k, resolution, token, now),
            Op::Get(k) => Answer::Read(of_model(self.model[k].record(), now, &self.names)),
        }
    }

    /// The row of the fence table (`idem_fence::FENCES`, docs/reliability.md "The fence
    /// conditions") that `op` writes under, and the model's verdict on it before the
    /// write: what a store that disagrees got wrong. `None` for what is not a fenced write.
    pub fn fence_verdict(&self, op: Op) -> Option<String> {
        let mine = |p: Proxy, k: usize| self.model_attempts[p.index()][k].unwrap_or(STRANGER);
        let (k, write, token, window) = match op {
            Op::Complete(p, k, _) | Op::EndLease(p, k) => {
                (k, Write::ReplaceIfOwner, Some(mine(p, k).token), None)
            }
            Op::Renew(p, k) => (k, Write::Renew, Some(mine(p, k).token), None),
            Op::Release(p, k) => (k, Write::ReleaseIfOwner, Some(mine(p, k).token), None),
            Op::TakeOver(_, k, seen, window) => {
                let settled = match self.model[k].record() {
                    Some(Record::InProgress { settled, .. }) => settled,
                    _ => None,
                };
                let window = window
                    .map(u64::from)
                    .filter(|_| settled != Some(Settled::NotExecuted));
                (k, Write::TakeOver, Some(self.model_seen(k, seen)), window)
            }
            Op::Resolve(k, _) => {
                let read = self.model[k].record().map_or(NOBODY, |r| r.token());
                (k, Write::TakeOver, Some(read), None)
            }
            Op::Tick(_) | Op::Reserve(..) | Op::Get(_) => return None,
        };
        let verdict = match self.model[k].refusal(write, token, window) {
            None => "admits it".to_owned(),
            Some(condition) => format!("refuses it: `{}` fails", condition.name()),
        };
        let row: Vec<&str> = write.requires().iter().map(|c| c.name()).collect();
        Some(format!(
            "fence `{}` (requires {}): the table {verdict}",
            write.name(),
            row.join(", ")
        ))
    }

    /// The token a takeover by a duplicate that read `seen` carries.
    fn model_seen(&self, k: usize, seen: Seen) -> Token {
        match seen {
            Seen::Current => self.model[k].record().map_or(NOBODY, |r| r.token()),
            Seen::Proxy(q) => self.model_attempts[q.index()][k].map_or(NOBODY, |a| a.token),
            Seen::Operator => self.model_operator[k].unwrap_or(NOBODY),
        }
    }

    /// The admin's resolve: refused unless the record is an unknown outcome by the
    /// store's clock (as `admin::unknown::Intent`), then the store's fenced resolve.
    fn model_resolve(&mut self, k: usize, r: Resolution, token: Token, now: u64) -> Answer {
        let record = match self.model[k].record() {
            None => return Answer::NotUnknown("absent"),
            Some(Record::Completed { .. }) => return Answer::NotUnknown("completed"),
            Some(Record::InProgress {
                settled: Some(Settled::NotExecuted),
                ..
            }) => return Answer::NotUnknown("not_executed"),
            Some(r) if !r.lease_ended(now) => return Answer::NotUnknown("in_flight"),
            Some(r) => r,
        };
        let resolution = match r {
            Resolution::NotExecuted => ModelResolution::NotExecuted,
            Resolution::Completed { ok } => ModelResolution::Completed(Outcome {
                id: OPERATOR_OUTCOME,
                attempt: record.attempt(),
                ok,
            }),
        };
        let resolved = self.model[k].resolve(record.token(), token, resolution);
        if resolved {
            self.model_operator[k] = Some(token);
        }
        Answer::Done(resolved)
    }

    /// Proxy `p` now owns the key's attempt carrying `token`.
    fn hold(&mut self, p: Proxy, k: usize, token: Token) {
        let attempt = self.model[k].record().map_or(0, |r| r.attempt());
        self.model_attempts[p.index()][k] = Some(ModelAttempt { token, attempt });
    }
}
