//! `idem demo`: in one process on loopback, a mock payments API, idem in front of it
//! (memory store), and the three ways agents double-charge — played first straight to
//! the API, then through idem. Prints calls made vs charges executed.

mod payments;
pub mod scenario;

use std::time::Duration;

use crate::config::Config;
use payments::Payments;
use scenario::{Scenario, Tally};

/// How long the mock API takes to answer a charge.
const API_LATENCY: Duration = Duration::from_millis(1200);

const ROUTES: &str = r#"
routes:
  - name: charge_customer
    methods: [POST]
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
    on_concurrent: wait
    wait_timeout: 10s
"#;

/// Run the demo and print the table. Returns the rows for tests.
pub async fn run(out: &mut impl std::io::Write) -> Result<Vec<(Scenario, Tally, Tally)>, String> {
    let direct_api = Payments::start(API_LATENCY)
        .await
        .map_err(|e| e.to_string())?;
    let guarded_api = Payments::start(API_LATENCY)
        .await
        .map_err(|e| e.to_string())?;
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nupstream:\n  url: http://{}\n{ROUTES}",
        guarded_api.addr
    );
    let config = Config::from_yaml_str(&yaml, None).map_err(|e| e.to_string())?;
    let idem = crate::app::start(&config)
        .await
        .map_err(|e| e.to_string())?;
    let direct = format!("http://{}", direct_api.addr);
    let through = format!("http://{}", idem.addr);

    let _ = writeln!(
        out,
        "idem demo: a payments API that charges on every call (answers in {API_LATENCY:?}),"
    );
    let _ = writeln!(
        out,
        "called by an agent first directly, then through idem (memory store).\n"
    );
    let mut rows = Vec::new();
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let invoice = format!("inv_{}", i + 1);
        let before = direct_api.charges();
        let mut d = scenario.play(&direct, &invoice).await;
        d.charges = direct_api.charges() - before;
        let before = guarded_api.charges();
        let mut g = scenario.play(&through, &invoice).await;
        g.charges = guarded_api.charges() - before;
        let _ = writeln!(out, "  {:<40} {}", scenario.title(), scenario.story());
        rows.push((*scenario, d, g));
    }
    let _ = writeln!(out);
    print_table(out, &rows);
    idem.shutdown().await;
    Ok(rows)
}

fn print_table(out: &mut impl std::io::Write, rows: &[(Scenario, Tally, Tally)]) {
    let _ = writeln!(
        out,
        "{:<34} | {:^17} | {:^38}",
        "", "straight to API", "through idem"
    );
    let _ = writeln!(
        out,
        "{:<34} | {:>7} {:>9} | {:>7} {:>9} {:>8} {:>10}",
        "scenario", "calls", "charges", "calls", "charges", "replays", "conflicts"
    );
    let _ = writeln!(out, "{}", "-".repeat(34 + 3 + 17 + 3 + 38));
    let (mut dc, mut gc) = (0, 0);
    for (scenario, d, g) in rows {
        dc += d.charges;
        gc += g.charges;
        let _ = writeln!(
            out,
            "{:<34} | {:>7} {:>9} | {:>7} {:>9} {:>8} {:>10}",
            scenario.title(),
            d.calls,
            d.charges,
            g.calls,
            g.charges,
            g.replays,
            g.conflicts
        );
    }
    let _ = writeln!(out, "{}", "-".repeat(34 + 3 + 17 + 3 + 38));
    let intents = rows.len();
    let _ = writeln!(
        out,
        "{intents} intended charges: {dc} executed straight to the API, {gc} through idem."
    );
}
