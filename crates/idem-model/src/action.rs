//! The model's atomic steps, and which are enabled in a state. Each proxy step is one
//! store operation or one exchange with the upstream; everything else is the
//! environment (time, faults, the operator, the waiter).

use crate::config::{Backend, Config, Mutant, MAX_ATTEMPTS};
use crate::owner;
use crate::state::{Operator, Phase, Stage, State, Waiter};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// A caller's request (the first or a duplicate) reaches this proxy: reserve.
    Request(usize),
    TakeOver(usize),
    Lookup {
        proxy: usize,
        failed: bool,
    },
    Settle(usize),
    NewAttempt(usize),
    /// The store's answer granting a lease reaches the proxy (`Config::answer_delay`).
    Answer(usize),
    Send {
        proxy: usize,
        ok: bool,
    },
    /// The request on the wire at this index reaches the upstream.
    Deliver(usize),
    NotSent(usize),
    /// `acked` false: applied, but its `WAIT` failed (`Backend::RedisWait` only).
    Renew {
        proxy: usize,
        acked: bool,
    },
    Complete(usize),
    CompleteFails {
        proxy: usize,
        applied: bool,
    },
    TimeOut(usize),
    RetryCompletion(usize),
    GiveUp(usize),
    Crash(usize),
    Replicate,
    FailOver,
    /// Redis evicts the record (`Config::eviction`).
    Evict,
    OperatorLook,
    OperatorResolve,
    Subscribe,
    WaiterRead,
}

/// The steps enabled in `s`, in a deterministic order.
pub fn enabled(config: &Config, s: &State, out: &mut Vec<Action>) {
    // Time stops at the bound, and a request on the wire arrives by its `by`.
    if s.now() < config.max_time && s.wire.iter().all(|w| w.by > s.now()) {
        out.push(Action::Tick);
    }
    if s.budget.requests > 0 {
        // Idle proxies with the same clock are interchangeable: only the first of each
        // takes a new request (a symmetry reduction that loses no behaviour).
        for p in 0..config.proxies {
            let idle = s.proxies[p] == Phase::Idle;
            let first =
                (0..p).all(|q| s.proxies[q] != Phase::Idle || config.skew[q] != config.skew[p]);
            if idle && first {
                out.push(Action::Request(p));
            }
        }
    }
    for p in 0..config.proxies {
        proxy_steps(config, s, p, out);
    }
    environment_steps(config, s, out);
}

fn proxy_steps(config: &Config, s: &State, p: usize, out: &mut Vec<Action>) {
    match s.proxies[p] {
        Phase::Idle => return,
        Phase::TakingOver { .. } => out.push(Action::TakeOver(p)),
        Phase::Reconciling { .. } => {
            out.push(Action::Lookup {
                proxy: p,
                failed: false,
            });
            out.push(Action::Lookup {
                proxy: p,
                failed: true,
            });
        }
        Phase::Settling { .. } => out.push(Action::Settle(p)),
        Phase::NewAttempt { .. } => out.push(Action::NewAttempt(p)),
        Phase::Asked { .. } => out.push(Action::Answer(p)),
        Phase::Owner { attempt, stage, .. } => {
            match stage {
                Stage::Ready => {
                    if owner::may_send(config, s, p) {
                        out.push(Action::Send { proxy: p, ok: true });
                        if config.on_failure_retry && attempt < MAX_ATTEMPTS {
                            out.push(Action::Send {
                                proxy: p,
                                ok: false,
                            });
                        }
                    }
                    out.push(Action::NotSent(p));
                }
                Stage::Sent => out.push(Action::TimeOut(p)),
                Stage::Awaiting(_) => {
                    out.push(Action::Complete(p));
                    if s.budget.failed_writes > 0 {
                        out.push(Action::CompleteFails {
                            proxy: p,
                            applied: false,
                        });
                        out.push(Action::CompleteFails {
                            proxy: p,
                            applied: true,
                        });
                    }
                    out.push(Action::TimeOut(p));
                }
                Stage::RetryingCompletion(_) => {
                    out.push(Action::RetryCompletion(p));
                    if owner::may_give_up(config, s, p) {
                        out.push(Action::GiveUp(p));
                    }
                }
            }
            if owner::may_renew(config, s, p) {
                out.push(Action::Renew {
                    proxy: p,
                    acked: true,
                });
                if config.backend == Backend::RedisWait {
                    out.push(Action::Renew {
                        proxy: p,
                        acked: false,
                    });
                }
            }
        }
    }
    if s.budget.crashes > 0 {
        out.push(Action::Crash(p));
    }
}

fn environment_steps(config: &Config, s: &State, out: &mut Vec<Action>) {
    out.extend((0..s.wire.len()).map(Action::Deliver));
    if config.backend != Backend::Durable && s.replica != s.store.record() {
        out.push(Action::Replicate);
        if s.budget.failovers > 0 {
            out.push(Action::FailOver);
        }
    }
    if s.budget.evictions > 0 && s.store.record().is_some() {
        out.push(Action::Evict);
    }
    if crate::environment::may_look(s) {
        out.push(Action::OperatorLook);
    }
    if matches!(s.operator, Operator::Looked { .. }) {
        out.push(Action::OperatorResolve);
    }
    if config.waiter {
        let bug = config.has(Mutant::ReadThenSubscribe);
        match s.waiter {
            Waiter::Idle if bug => out.push(Action::WaiterRead),
            Waiter::Idle => out.push(Action::Subscribe),
            Waiter::ReadFirst { .. } => out.push(Action::Subscribe),
            Waiter::Subscribed { .. } => out.push(Action::WaiterRead),
            Waiter::Waiting { .. } | Waiter::Done => {}
        }
    }
}
