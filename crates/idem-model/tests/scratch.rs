use idem_model::*;
#[test]
fn scratch() {
    for (name, c) in [
        ("hold", Config::small(OnUnknown::Hold)),
        ("reconcile", Config::small(OnUnknown::Reconcile)),
        ("retry", Config::small(OnUnknown::Retry { window: 3 })),
    ] {
        let r = explore(c);
        println!(
            "{name}: {} unique, {} total, depth {}, {:?}",
            r.unique_states, r.states, r.max_depth, r.elapsed
        );
        for (p, t) in &r.discoveries {
            if idem_model::properties::SAFETY.contains(p) {
                println!("VIOLATION {p}: {t}");
            } else {
                println!("  found {p} in {} steps", t.actions.len());
            }
        }
    }
}
