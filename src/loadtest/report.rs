//! What `idem loadtest` measured: latency histogram, response classes, per-intent
//! evidence of double execution, and the `--check-url` verdicts.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// How one request ended, as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A response: its status, whether it carried `Idempotent-Replayed: true`, and a
    /// hash of its body (kept for 2xx only).
    Response {
        status: u16,
        replayed: bool,
        body_hash: Option<u64>,
    },
    /// No response within `--timeout`.
    Timeout,
    /// Connection refused, reset, malformed response…
    Transport(String),
}

/// What one intent received, enough to tell whether it ran twice.
#[derive(Debug, Clone, Default)]
struct IntentSeen {
    /// Body hash of the first 2xx answer.
    first_2xx: Option<u64>,
    /// A later 2xx answer had a different body: the intent ran (at least) twice.
    differed: bool,
    sent: u32,
}

/// Results of one run; fed by [`Tally::record`] as responses arrive.
pub struct Tally {
    latency_us: Histogram<u64>,
    intents: Vec<IntentSeen>,
    /// Intent `i`'s key is this prefix followed by `i`.
    key_prefix: String,
    pub forwarded: u64,
    pub replayed: u64,
    pub conflicts: u64,
    /// Other statuses and transport failures, by label (`"502"`, `"timeout"`, …).
    pub errors: BTreeMap<String, u64>,
    first_transport_error: Option<String>,
}

impl Tally {
    pub fn new(key_prefix: String, intents: usize) -> Tally {
        Tally {
            // 1 µs .. 1 h, 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
            intents: vec![IntentSeen::default(); intents],
            key_prefix,
            forwarded: 0,
            replayed: 0,
            conflicts: 0,
            errors: BTreeMap::new(),
            first_transport_error: None,
        }
    }

    pub fn record(&mut self, intent: usize, latency: Duration, answer: Reply) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.saturating_record(us.max(1));
        let seen = &mut self.intents[intent];
        seen.sent += 1;
        match answer {
            Reply::Response {
                status,
                replayed,
                body_hash,
            } => {
                if (200..300).contains(&status) {
                    let hash = body_hash.unwrap_or_default();
                    match seen.first_2xx {
                        None => seen.first_2xx = Some(hash),
                        Some(first) if first != hash => seen.differed = true,
                        Some(_) => {}
                    }
                }
                if replayed {
                    self.replayed += 1;
                } else if (200..300).contains(&status) {
                    self.forwarded += 1;
                } else if status == 409 {
                    self.conflicts += 1;
                } else {
                    *self.errors.entry(status.to_string()).or_default() += 1;
                }
            }
            Reply::Timeout => *self.errors.entry("timeout".into()).or_default() += 1,
            Reply::Transport(e) => {
                self.first_transport_error.get_or_insert(e);
                *self.errors.entry("transport".into()).or_default() += 1;
            }
        }
    }

    /// Indexes of the intents that had at least one request sent.
    /// Errors so far, of every kind (the progress shows them while the run goes on).
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn sent_intents(&self) -> impl Iterator<Item = usize> + '_ {
        self.intents
            .iter()
            .enumerate()
            .filter(|(_, s)| s.sent > 0)
            .map(|(i, _)| i)
    }

    pub fn key(&self, intent: usize) -> String {
        format!("{}{intent}", self.key_prefix)
    }

    /// Close the tally into a report.
    pub fn finish(self, run: RunInfo, elapsed: Duration, check: Option<CheckResult>) -> Report {
        let requests = self.latency_us.len();
        let q = |p: f64| self.latency_us.value_at_quantile(p) as f64 / 1000.0;
        let double: Vec<String> = self
            .intents
            .iter()
            .enumerate()
            .filter(|(_, s)| s.differed)
            .map(|(i, _)| self.key(i))
            .collect();
        let intents_sent = self.intents.iter().filter(|s| s.sent > 0).count() as u64;
        Report {
            requests_per_second: requests as f64 / elapsed.as_secs_f64().max(1e-9),
            latency_ms: LatencySummary {
                p50: q(0.50),
                p90: q(0.90),
                p99: q(0.99),
                p999: q(0.999),
                max: self.latency_us.max() as f64 / 1000.0,
            },
            run,
            requests,
            intents_sent,
            elapsed_seconds: elapsed.as_secs_f64(),
            forwarded: self.forwarded,
            replayed: self.replayed,
            conflicts: self.conflicts,
            errors: self.errors.values().sum(),
            errors_by_kind: self.errors,
            first_transport_error: self.first_transport_error,
            double_executions: double.len() as u64,
            double_executed_keys: double.into_iter().take(10).collect(),
            check,
        }
    }
}

/// The run's shape, echoed in the report.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub target: String,
    pub run_id: String,
    pub intents: u64,
    pub duplicates: u64,
    pub concurrency: usize,
    pub key_header: Option<String>,
    /// The dispatch stopped at `--duration-limit` before every request was sent.
    pub stopped_at_limit: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p999: f64,
    pub max: f64,
}

/// Per-intent execution counts read from `--check-url`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckResult {
    pub checked: u64,
    /// Intents whose count was not 1, as (key, count), at most 10.
    pub wrong: Vec<(String, u64)>,
    pub wrong_total: u64,
    /// Intents whose count could not be read, at most 10 reasons.
    pub failures: Vec<String>,
    pub failures_total: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub run: RunInfo,
    pub requests: u64,
    pub intents_sent: u64,
    pub elapsed_seconds: f64,
    pub requests_per_second: f64,
    pub latency_ms: LatencySummary,
    pub forwarded: u64,
    pub replayed: u64,
    pub conflicts: u64,
    pub errors: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub first_transport_error: Option<String>,
    /// Intents that received two different 2xx bodies: they ran more than once.
    pub double_executions: u64,
    pub double_executed_keys: Vec<String>,
    pub check: Option<CheckResult>,
}

impl Report {
    /// No double execution, no error, and (with `--check-url`) every count was 1.
    pub fn passed(&self) -> bool {
        self.double_executions == 0
            && self.errors == 0
            && self
                .check
                .as_ref()
                .is_none_or(|c| c.wrong_total == 0 && c.failures_total == 0)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.run;
        writeln!(
            f,
            "idem loadtest: {} intents x {} duplicates, concurrency {}, target {}",
            r.intents, r.duplicates, r.concurrency, r.target
        )?;
        match &r.key_header {
            Some(h) => writeln!(f, "intent keys: {h}: lt-{}-<i>", r.run_id)?,
            None => writeln!(f, "intent keys: lt-{}-<i> (no key header sent)", r.run_id)?,
        }
        if r.stopped_at_limit {
            writeln!(
                f,
                "stopped at --duration-limit: {} of {} intents sent",
                self.intents_sent, r.intents
            )?;
        }
        writeln!(
            f,
            "requests:  {} in {:.2} s = {:.0} req/s",
            self.requests, self.elapsed_seconds, self.requests_per_second
        )?;
        let l = &self.latency_ms;
        writeln!(
            f,
            "latency:   p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms",
            l.p50, l.p90, l.p99, l.p999, l.max
        )?;
        writeln!(
            f,
            "responses: forwarded {}  replayed {}  conflicts (409) {}  errors {}",
            self.forwarded, self.replayed, self.conflicts, self.errors
        )?;
        if !self.errors_by_kind.is_empty() {
            let kinds: Vec<String> = self
                .errors_by_kind
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            writeln!(f, "errors:    {}", kinds.join(", "))?;
        }
        if let Some(e) = &self.first_transport_error {
            writeln!(f, "first transport error: {e}")?;
        }
        writeln!(
            f,
            "double executions (two different 2xx bodies for one intent): {}",
            self.double_executions
        )?;
        for key in &self.double_executed_keys {
            writeln!(f, "  ran more than once: {key}")?;
        }
        if let Some(c) = &self.check {
            writeln!(
                f,
                "check-url: {} intents checked, {} with a count other than 1, {} unreadable",
                c.checked, c.wrong_total, c.failures_total
            )?;
            for (key, n) in &c.wrong {
                writeln!(f, "  {key}: count {n}")?;
            }
            for why in &c.failures {
                writeln!(f, "  {why}")?;
            }
        }
        writeln!(f, "result: {}", if self.passed() { "PASS" } else { "FAIL" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(status: u16, replayed: bool, hash: u64) -> Reply {
        Reply::Response {
            status,
            replayed,
            body_hash: Some(hash),
        }
    }

    fn run() -> RunInfo {
        RunInfo {
            target: "http://t".into(),
            run_id: "r".into(),
            intents: 2,
            duplicates: 3,
            concurrency: 4,
            key_header: Some("Idempotency-Key".into()),
            stopped_at_limit: false,
        }
    }

    #[test]
    fn classes_and_double_execution() {
        let mut t = Tally::new("lt-r-".into(), 2);
        let ms = Duration::from_millis(1);
        t.record(0, ms, ok(201, false, 1));
        t.record(0, ms, ok(201, true, 1));
        t.record(0, ms, ok(409, false, 9));
        t.record(1, ms, ok(201, false, 2));
        t.record(1, ms, ok(201, false, 3));
        let report = t.finish(run(), Duration::from_secs(1), None);
        assert_eq!(
            (report.forwarded, report.replayed, report.conflicts),
            (3, 1, 1)
        );
        assert_eq!(report.double_executions, 1);
        assert_eq!(report.double_executed_keys, vec!["lt-r-1".to_owned()]);
        assert!(!report.passed());
        assert!(report.to_string().contains("result: FAIL"));
    }

    #[test]
    fn errors_fail_the_run() {
        let mut t = Tally::new("k".into(), 1);
        t.record(0, Duration::from_millis(2), ok(502, false, 0));
        t.record(0, Duration::from_millis(2), Reply::Timeout);
        let report = t.finish(run(), Duration::from_secs(1), None);
        assert_eq!(report.errors, 2);
        assert_eq!(report.errors_by_kind["502"], 1);
        assert!(!report.passed());
        let mut t = Tally::new("k".into(), 1);
        t.record(0, Duration::from_millis(2), ok(200, false, 0));
        let report = t.finish(run(), Duration::from_secs(1), None);
        assert!(report.passed());
        assert!((report.latency_ms.p50 - 2.0).abs() < 0.01);
    }
}
