//! [`IdemModel`]: the reservation protocol as a stateright [`Model`]: the initial
//! state, the enabled steps ([`crate::action`]) and what each does.

use stateright::{Model, Property};

use crate::action::{self, Action};
use crate::config::{Config, Mutant, MAX_ATTEMPTS};
use crate::environment as env;
use crate::state::{Budget, Ghost, Operator, Phase, State, Waiter};
use crate::store::{ModelStore, StoreBugs};
use crate::upstream::Upstream;
use crate::{duplicate, owner, properties};

/// One intent, `config.proxies` proxies, one store, one upstream.
#[derive(Clone, Debug)]
pub struct IdemModel {
    pub config: Config,
}

impl IdemModel {
    pub fn new(config: Config) -> Self {
        assert_eq!(config.skew.len(), config.proxies, "one skew per proxy");
        IdemModel { config }
    }

    /// The store's deliberate bugs under this configuration's mutant.
    fn store_bugs(&self) -> StoreBugs {
        let c = &self.config;
        StoreBugs {
            takeover_ignores_lease: c.has(Mutant::TakeoverIgnoresLease),
            complete_ignores_token: c.has(Mutant::CompleteIgnoresToken),
            resolve_ignores_token: c.has(Mutant::ResolveIgnoresToken),
        }
    }
}

impl Model for IdemModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.config;
        vec![State {
            store: ModelStore::with_bugs(c.lease, self.store_bugs()),
            replica: None,
            proxies: vec![Phase::Idle; c.proxies],
            wire: Vec::new(),
            upstream: Upstream::new(MAX_ATTEMPTS),
            operator: Operator::Idle,
            waiter: Waiter::Idle,
            budget: Budget {
                requests: c.requests,
                crashes: c.crashes,
                failed_writes: c.failed_writes,
                resolutions: c.resolutions,
                failovers: c.failovers,
                evictions: u8::from(c.eviction),
            },
            next_token: 0,
            ghost: Ghost::default(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        action::enabled(&self.config, state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let c = &self.config;
        let mut s = last.clone();
        let before = s.store.record();
        match action {
            Action::Tick => env::tick(&mut s),
            Action::Request(p) => duplicate::request(c, &mut s, p),
            Action::TakeOver(p) => {
                let Phase::TakingOver { seen } = s.proxies[p] else {
                    unreachable!("take over is enabled only while taking over")
                };
                duplicate::take_over(c, &mut s, p, seen);
            }
            Action::Lookup { proxy, failed } => {
                let Phase::Reconciling { seen, attempt } = s.proxies[proxy] else {
                    unreachable!("lookup is enabled only while reconciling")
                };
                duplicate::lookup(&mut s, proxy, seen, attempt, failed);
            }
            Action::Settle(p) => duplicate::settle(c, &mut s, p),
            Action::NewAttempt(p) => {
                let Phase::NewAttempt { seen } = s.proxies[p] else {
                    unreachable!("new attempt is enabled only after a stored failure")
                };
                duplicate::new_attempt(c, &mut s, p, seen);
            }
            Action::Answer(p) => duplicate::answer(c, &mut s, p),
            Action::Send { proxy, ok } => owner::send(c, &mut s, proxy, ok),
            Action::Deliver(i) => owner::deliver(c, &mut s, i),
            Action::NotSent(p) => owner::not_sent(c, &mut s, p),
            Action::Renew { proxy, acked } => owner::renew(c, &mut s, proxy, acked),
            Action::Complete(p) => owner::complete(c, &mut s, p),
            Action::CompleteFails { proxy, applied } => {
                owner::complete_fails(c, &mut s, proxy, applied)
            }
            Action::TimeOut(p) => owner::time_out(&mut s, p),
            Action::RetryCompletion(p) => owner::retry_completion(&mut s, p),
            Action::GiveUp(p) => owner::give_up(&mut s, p),
            Action::Crash(p) => env::crash(&mut s, p),
            Action::Replicate => env::replicate(&mut s),
            Action::FailOver => env::fail_over(&mut s),
            Action::Evict => env::evict(&mut s),
            Action::OperatorLook => env::look(&mut s),
            Action::OperatorResolve => env::resolve(&mut s),
            Action::Subscribe => env::subscribe(&mut s),
            Action::WaiterRead => env::read(c, &mut s),
        }
        env::replicated_if_waited(c, &mut s, action, before);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}
