//! An operation applied to a real store through idem's `Store` API, as the proxies
//! and the admin API call it, with the records each proxy holds.

use bytes::Bytes;
use idem::store::{
    Record, RecordState, Reserve, Settled, Store, StoreError, StoredResponse, Token,
};

use super::ops::{Op, Proxy, Resolution, Seen};
use super::view::{of_real, Answer, At};
use super::world::{World, OPERATOR_OUTCOME, RETENTION};

/// A token no one was issued: what a takeover "read" when there was nothing to read.
const NOBODY: Token = Token([0; 16]);

/// A stored response with the model outcome's status (see `view::status`).
fn response(id: u8, ok: bool) -> StoredResponse {
    StoredResponse {
        status: u16::from(id) + if ok { 200 } else { 400 },
        headers: vec![],
        body: Some(Bytes::from_static(b"{}")),
    }
}

impl World<'_> {
    /// Applies `op` (not a clock move) to the real store; `name` names the token a
    /// reservation, takeover or resolution writes.
    pub async fn on_real(&mut self, op: Op, name: Option<&str>) -> Result<Answer, StoreError> {
        let stores = self.stores;
        let store = |p: Proxy| &stores.proxies[p.index()];
        let key = self.keys[op.key().expect("not a clock move")];
        Ok(match op {
            Op::Tick(_) => unreachable!("clock moves are not operations"),
            Op::Reserve(p, k) => {
                let mine = self.reservation(p, k);
                self.name(name, mine.token);
                match store(p).reserve(&key, &mine, RETENTION).await? {
                    Reserve::Won => {
                        self.real_attempts[p.index()][k] = Some(mine);
                        Answer::Won
                    }
                    Reserve::Exists(record, now) => Answer::Exists(of_real(
                        Some(&record),
                        At::StoreMs(now),
                        &self.clock,
                        &self.names,
                    )),
                }
            }
            Op::Complete(p, k, ok) => {
                let mine = self.real_attempts[p.index()][k].take();
                let mine = mine.unwrap_or_else(|| self.stranger(p, k));
                let done = mine.completed(response(p.index() as u8 + 1, ok), RETENTION);
                let done = self.by_proxy(p, done);
                let write = store(p).replace_if_owner(&key, &mine.token, &done, RETENTION, true);
                Answer::Done(write.await?)
            }
            Op::Renew(p, k) => {
                let mine = self.real_attempts[p.index()][k].clone();
                let mine = mine.unwrap_or_else(|| self.stranger(p, k));
                let renewed = self.by_proxy(p, mine.renewed(self.lease()));
                let done = store(p)
                    .renew(&key, &mine.token, &renewed, RETENTION)
                    .await?;
                if done {
                    self.real_attempts[p.index()][k] = Some(renewed);
                }
                Answer::Done(done)
            }
            Op::Release(p, k) => {
                let mine = self.real_attempts[p.index()][k].take();
                let token = mine.map_or(NOBODY, |r| r.token);
                Answer::Done(store(p).release_if_owner(&key, &token).await?)
            }
            Op::EndLease(p, k) => {
                let mine = self.real_attempts[p.index()][k].clone();
                let mine = mine.unwrap_or_else(|| self.stranger(p, k));
                let ended = self.by_proxy(p, mine.lease_ended_now());
                let write = store(p).replace_if_owner(&key, &mine.token, &ended, RETENTION, true);
                let done = write.await?;
                if done {
                    self.real_attempts[p.index()][k] = Some(ended);
                }
                Answer::Done(done)
            }
            Op::TakeOver(p, k, seen, window) => {
                // The duplicate's read, which its new attempt continues (same attempt,
                // same first send).
                let read = store(p).get(&key).await?;
                let seen = match seen {
                    Seen::Current => read.as_ref().map_or(NOBODY, |r| r.token),
                    Seen::Proxy(q) => self.real_attempts[q.index()][k]
                        .as_ref()
                        .map_or(NOBODY, |r| r.token),
                    Seen::Operator => self.real_operator[k].unwrap_or(NOBODY),
                };
                // As the proxy decides: an attempt an operator settled as not executed
                // is taken over whatever the key window (its token fences that read).
                let not_executed = read
                    .as_ref()
                    .is_some_and(|r| r.token == seen && r.settled == Some(Settled::NotExecuted));
                let window = window
                    .filter(|_| !not_executed)
                    .map(|w| self.clock.span(u64::from(w)));
                let base = read.unwrap_or_else(|| self.reservation(p, k));
                let next = self.by_proxy(p, base.retried(self.lease()));
                self.name(name, next.token);
                let take = store(p).take_over(&key, &seen, &next, RETENTION, window);
                let taken = take.await?;
                if taken {
                    self.real_attempts[p.index()][k] = Some(next);
                }
                Answer::Done(taken)
            }
            Op::Resolve(k, resolution) => self.real_resolve(k, resolution, name).await?,
            Op::Get(k) => Answer::Read(self.read(k).await?),
        })
    }

    /// The record of key `k` as the operator's store handle reads it, at this tick.
    pub async fn read(&self, k: usize) -> Result<super::view::View, StoreError> {
        let record = self.stores.operator.get(&self.keys[k]).await?;
        Ok(of_real(record.as_ref(), At::Tick, &self.clock, &self.names))
    }

    /// As `admin::resolve`: read the record and the store's clock, refuse what is not
    /// an unknown outcome (`admin::unknown::Intent`), then `take_over` with the token
    /// read and no key window.
    async fn real_resolve(
        &mut self,
        k: usize,
        resolution: Resolution,
        name: Option<&str>,
    ) -> Result<Answer, StoreError> {
        let store: &Store = &self.stores.operator;
        let Some(record) = store.get(&self.keys[k]).await? else {
            return Ok(Answer::NotUnknown("absent"));
        };
        let now = store.clock_ms().await?;
        match (record.state, record.settled) {
            (RecordState::Completed, _) => return Ok(Answer::NotUnknown("completed")),
            (_, Some(Settled::NotExecuted)) => return Ok(Answer::NotUnknown("not_executed")),
            _ if !record.lease_ended(now) => return Ok(Answer::NotUnknown("in_flight")),
            _ => {}
        }
        let settled = match resolution {
            Resolution::NotExecuted => record.not_executed(),
            Resolution::Completed { ok } => {
                let response = response(OPERATOR_OUTCOME, ok);
                record.settled_with(Settled::Resolved, response, RETENTION)
            }
        };
        let settled = self.by_operator(settled);
        self.name(name, settled.token);
        let take = store.take_over(&self.keys[k], &record.token, &settled, RETENTION, None);
        let resolved = take.await?;
        if resolved {
            self.real_operator[k] = Some(settled.token);
        }
        Ok(Answer::Done(resolved))
    }

    /// The record a proxy writes with when it holds no attempt on the key: one with a
    /// token no one holds (see `model_side::STRANGER`).
    fn stranger(&self, p: Proxy, k: usize) -> Record {
        Record {
            token: NOBODY,
            ..self.reservation(p, k)
        }
    }

    fn name(&mut self, name: Option<&str>, token: Token) {
        if let Some(name) = name {
            self.names.real_token(name, token);
        }
    }
}
