//! An explicit-state model of idem's reservation protocol, checked with stateright.
//!
//! idem reserves an intent's key in a store, forwards the call once, stores the
//! outcome and replays it to duplicates. This crate models that protocol with every
//! lease judged on the **store's** clock, N proxies sharing one store, one intent and
//! its duplicates, and the faults idem claims to survive (proxy crashes and pauses
//! longer than a lease, failed completion writes, skewed proxy clocks, requests that
//! reach the upstream up to the send guard's margin late, store answers that reach the
//! owner late, a Redis failover with or without `wait_replicas`), and checks the
//! properties of [`properties`] over every reachable state. Each [`Mutant`] is a
//! deliberate bug the checker must catch, and each assumption the code enforces rather
//! than the model (the send guard's margin, no eviction) is a configuration whose
//! relaxation the checker catches too.
//!
//! [`ModelStore`] is the pure state machine of one record under the store's
//! operations, public so that a model-based test of the real stores can compare them
//! with it. The crate does not depend on idem: it restates the protocol, and
//! `docs/reliability.md` ("What is proven and what is tested") says what it leaves out.

#![forbid(unsafe_code)]

pub mod action;
pub mod check;
pub mod config;
pub mod decide;
mod duplicate;
mod environment;
pub mod ghost;
pub mod model;
mod owner;
pub mod properties;
pub mod record;
pub mod state;
pub mod store;
pub mod upstream;

pub use check::{explore, find, Report, Trace};
pub use config::{Backend, Config, Mutant, OnUnknown, UpstreamKind};
/// The fence table the model's store evaluates (`crates/idem-fence`).
pub use idem_fence as fence;
pub use model::IdemModel;
pub use record::{Outcome, Record, Reserved, Resolution, Settled, Tick, Token};
pub use store::{ModelStore, StoreBugs};
