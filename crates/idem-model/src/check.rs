//! Running the checker: a complete breadth-first exploration with its figures, or a
//! search for one property's discovery (a counterexample for an `always`, an example
//! for a `sometimes`), shortest first, printed as the trace of steps that leads there.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use crate::action::Action;
use crate::config::Config;
use crate::model::IdemModel;
use crate::state::State;

/// A discovery: the steps from the initial state, and the state they reach.
#[derive(Clone, Debug)]
pub struct Trace {
    pub actions: Vec<Action>,
    pub last: State,
}

impl std::fmt::Display for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} steps:", self.actions.len())?;
        for (i, a) in self.actions.iter().enumerate() {
            writeln!(f, "  {:>2}. {a:?}", i + 1)?;
        }
        write!(f, "  reaching {:#?}", self.last)
    }
}

/// What one exploration found and cost.
#[derive(Debug)]
pub struct Report {
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Every property with a discovery, by name.
    pub discoveries: BTreeMap<&'static str, Trace>,
    /// Whether every reachable state was visited.
    pub complete: bool,
}

/// One thread: the machine's two cores are shared with other builds, and stateright
/// keeps the *last* discovery it makes, so a single thread stopping at the first
/// discovery gives a short, reproducible trace.
fn threads() -> usize {
    1
}

fn report(checker: &impl Checker<IdemModel>, started: Instant) -> Report {
    let discoveries = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| {
            let last = path.last_state().clone();
            (
                name,
                Trace {
                    actions: path.into_actions(),
                    last,
                },
            )
        })
        .collect();
    Report {
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        discoveries,
        complete: false,
    }
}

/// Explore every reachable state of `config` (breadth first, so every discovery is a
/// shortest one).
pub fn explore(config: Config) -> Report {
    let started = Instant::now();
    let model = IdemModel::new(config);
    let properties = model.properties().len();
    let checker = model.checker().threads(threads()).spawn_bfs().join();
    let mut r = report(&checker, started);
    // The checker stops early only once every property has a discovery; short of
    // that, a finished check has visited every reachable state.
    r.complete = checker.is_done() && r.discoveries.len() < properties;
    r
}

/// Search `config` for `property`'s discovery only, stopping at the first (shortest).
pub fn find(config: Config, property: &'static str) -> (Option<Trace>, Report) {
    let started = Instant::now();
    let checker = IdemModel::new(config)
        .checker()
        .threads(threads())
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    let r = report(&checker, started);
    (r.discoveries.get(property).cloned(), r)
}
