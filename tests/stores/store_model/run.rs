//! One case: the same operations applied to the model and to a real store, every
//! answer compared, then the record each operation touched; a transcript of the steps
//! for a failing case.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem::store::StoreError;
use proptest::test_runner::TestCaseError;

use super::clock::Schedule;
use super::ops::{key_name, Op};
use super::view::of_model;
use super::world::{Stores, World};

/// Runs of a case whose operations overran their tick before it is given up on.
const TRIES: usize = 3;

/// How one run of a case ended.
enum Ended {
    Agreed,
    Differs(String),
    /// An operation ran past its tick, or the store timed out: no verdict.
    Late(String),
}

/// Applies `ops` to the model and to `stores` on fresh keys. A case that could not run
/// on time ([`TRIES`] times) is rejected, not failed: it says nothing about the store.
pub async fn case(
    stores: &Stores,
    ops: &[Op],
    keys: usize,
    tick: Duration,
) -> Result<(), TestCaseError> {
    let mut why = String::new();
    for _ in 0..TRIES {
        match run(stores, ops, keys, tick).await {
            Ok(Ended::Agreed) => return Ok(()),
            Ok(Ended::Differs(transcript)) => return Err(TestCaseError::fail(transcript)),
            Ok(Ended::Late(at)) => why = at,
            Err(e @ StoreError::Timeout(_)) => why = e.to_string(),
            Err(e) => return Err(TestCaseError::fail(format!("the store failed: {e}"))),
        }
    }
    eprintln!("store_model: a case could not keep to its ticks ({why}); rejected");
    Err(TestCaseError::reject(why))
}

/// A name no earlier case (in this process or a previous run on the same store) used.
fn fresh_case() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let run: u64 = rand::random();
    format!("{run:016x}-{}", N.fetch_add(1, Ordering::Relaxed))
}

async fn run(
    stores: &Stores,
    ops: &[Op],
    keys: usize,
    tick: Duration,
) -> Result<Ended, StoreError> {
    let clock = Schedule::start(&stores.operator, tick).await?;
    let mut world = World::new(stores, clock, &fresh_case(), keys);
    let mut transcript = String::new();
    for (i, &op) in ops.iter().enumerate() {
        let step = i + 1;
        if let Op::Tick(n) = op {
            for model in &mut world.model {
                model.advance_clock(u64::from(n));
            }
            world.clock.advance(u64::from(n)).await;
            let _ = writeln!(transcript, "{step:3}. {op} (tick {})", world.clock.now());
            continue;
        }
        let fence = world.fence_verdict(op);
        let issued = issue(&mut world, op);
        let name = issued.as_ref().map(|(n, _)| n.clone());
        let model = world.on_model(op, issued.as_ref());
        let real = world.on_real(op, name.as_deref()).await?;
        let touched = op.key().expect("not a clock move");
        let held = (
            of_model(
                world.model[touched].record(),
                world.clock.now(),
                &world.names,
            ),
            world.read(touched).await?,
        );
        if world.clock.late() {
            return Ok(Ended::Late(format!(
                "step {step}, {op}, ran past tick {}",
                world.clock.now()
            )));
        }
        let agree = model == real && held.0 == held.1;
        let mark = if agree { "" } else { "   <-- differs" };
        let _ = writeln!(
            transcript,
            "{step:3}. {op}: model {model} | store {real}{mark}"
        );
        if held.0 != held.1 || !agree {
            let k = key_name(touched);
            let _ = writeln!(
                transcript,
                "     {k} held: model {} | store {}",
                held.0, held.1
            );
        }
        if let Some(fence) = fence.filter(|_| !agree) {
            let _ = writeln!(transcript, "     {fence}");
        }
        if !agree {
            return Ok(Ended::Differs(format!(
                "the model and the store disagree at step {step}:\n{transcript}"
            )));
        }
    }
    Ok(Ended::Agreed)
}

/// The token `op` writes, if it writes one: a proxy's new attempt or an operator's
/// resolution.
fn issue(world: &mut World<'_>, op: Op) -> Option<(String, idem_model::Token)> {
    match op {
        Op::Reserve(p, _) | Op::TakeOver(p, ..) => Some(world.issue(p.name())),
        Op::Resolve(..) => Some(world.issue("op")),
        _ => None,
    }
}
