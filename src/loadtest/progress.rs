//! Progress of `idem loadtest` while it runs, on stderr: a large run takes minutes,
//! and a silent one cannot be told apart from a stuck one.
//!
//! - On a terminal: a bar ([`indicatif`]) with the requests answered, the rate and the
//!   errors so far, redrawn in place and cleared before the report is printed.
//! - Anywhere else (a CI log, a pipe, a file): one line every `--progress-interval`
//!   (5 s by default). A bar's carriage returns would be noise in a log, and a line per
//!   request would drown it.
//! - `--progress-interval 0` turns both off.
//!
//! Only stderr is written to. The report (stdout) and the exit status are the same with
//! or without progress, so scripts that parse either are unaffected.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::time::{interval_at, Interval, MissedTickBehavior};

/// Where the progress of one run goes.
pub(super) enum Progress {
    Off,
    Bar {
        bar: ProgressBar,
        /// The errors the bar's message shows, so it is only rebuilt when they change.
        errors: u64,
    },
    Lines(Lines),
}

/// The state of the line-per-interval form.
pub(super) struct Lines {
    total: u64,
    started: Instant,
    /// When the previous line was written and how many requests were done then: the
    /// rate in a line is over its interval, so a run that slows down shows it.
    previous: (Instant, u64),
    ticker: Interval,
}

impl Progress {
    /// The bar on a terminal, lines elsewhere, nothing for a zero interval. `total` is
    /// the number of requests the run will send if it is not stopped at its limit.
    pub(super) fn start(interval: Duration, total: u64) -> Progress {
        if interval.is_zero() {
            return Progress::Off;
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {human_pos}/{human_len} requests, \
                 {per_sec:0}, {msg}",
            )
            .expect("a valid progress template");
            bar.set_style(style);
            bar.set_message("0 errors");
            // Redraw on a timer too, so the elapsed time moves while nothing answers.
            bar.enable_steady_tick(Duration::from_millis(250));
            return Progress::Bar { bar, errors: 0 };
        }
        Progress::Lines(Lines::new(interval, total))
    }

    /// A response arrived: `done` answered so far, `errors` of them errors.
    pub(super) fn update(&mut self, done: u64, errors: u64) {
        if let Progress::Bar { bar, errors: shown } = self {
            bar.set_position(done);
            if errors != *shown {
                *shown = errors;
                bar.set_message(format!("{errors} errors"));
            }
        }
    }

    /// Resolves when a progress line is due; never for the bar or when off, so it can
    /// sit in a `select!` beside the answers.
    pub(super) async fn due(&mut self) {
        match self {
            Progress::Lines(lines) => {
                lines.ticker.tick().await;
            }
            _ => std::future::pending().await,
        }
    }

    /// Write the line that [`Progress::due`] announced.
    pub(super) fn line(&mut self, done: u64, errors: u64) {
        if let Progress::Lines(lines) = self {
            let text = lines.line(done, errors, Instant::now());
            // A closed stderr must not fail the run.
            let _ = writeln!(std::io::stderr().lock(), "{text}");
        }
    }

    /// The run is over: clear the bar so the report starts on a clean line.
    pub(super) fn finish(self) {
        if let Progress::Bar { bar, .. } = self {
            bar.finish_and_clear();
        }
    }
}

impl Lines {
    fn new(interval: Duration, total: u64) -> Lines {
        let now = Instant::now();
        // The first line after one interval, not at once: a short run prints none.
        let mut ticker = interval_at(tokio::time::Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Lines {
            total,
            started: now,
            previous: (now, 0),
            ticker,
        }
    }

    fn line(&mut self, done: u64, errors: u64, now: Instant) -> String {
        let (then, done_then) = self.previous;
        self.previous = (now, done);
        let window = now.duration_since(then).as_secs_f64();
        let rate = if window > 0.0 {
            (done - done_then) as f64 / window
        } else {
            0.0
        };
        let percent = if self.total > 0 {
            done as f64 * 100.0 / self.total as f64
        } else {
            0.0
        };
        format!(
            "loadtest progress: {done}/{} requests ({percent:.0}%) in {:.1} s, \
             {rate:.0} req/s over the last {window:.1} s, {errors} errors",
            self.total,
            now.duration_since(self.started).as_secs_f64(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_gives_done_rate_over_its_window_and_errors() {
        let mut lines = Lines::new(Duration::from_secs(5), 1000);
        let t0 = lines.started;
        let first = lines.line(200, 0, t0 + Duration::from_secs(2));
        assert_eq!(
            first,
            "loadtest progress: 200/1000 requests (20%) in 2.0 s, \
             100 req/s over the last 2.0 s, 0 errors"
        );
        // The rate covers only the requests since the previous line.
        let second = lines.line(500, 3, t0 + Duration::from_secs(5));
        assert!(
            second.contains("500/1000 requests (50%) in 5.0 s"),
            "{second}"
        );
        assert!(
            second.contains("100 req/s over the last 3.0 s, 3 errors"),
            "{second}"
        );
    }

    #[test]
    fn zero_interval_is_off() {
        assert!(matches!(Progress::start(Duration::ZERO, 10), Progress::Off));
    }
}
