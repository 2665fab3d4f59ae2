//! Progress: the run's counters, shown on standard error as an `indicatif` bar (rate,
//! ETA, ok/failed/retried) when it is a terminal, as a plain line every 10 s otherwise,
//! and not at all with `--quiet`; and the one-line summary at the end.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::options::Options;

/// How often the bar is redrawn.
const BAR_TICK: Duration = Duration::from_millis(200);
/// How often a plain progress line is printed.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// What the run has done so far; every stage adds to it.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    read: AtomicU64,
    bytes_read: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    resumed: AtomicU64,
}

impl Counters {
    pub(crate) fn line_read(&self) {
        self.read.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_bytes_read(&self, bytes: u64) {
        self.bytes_read.store(bytes, Ordering::Relaxed);
    }

    pub(crate) fn line_written(&self, ok: bool) {
        let counter = if ok { &self.ok } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn line_retried(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_resumed(&self, lines: u64) {
        self.resumed.store(lines, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    pub(crate) fn written(&self) -> u64 {
        self.ok.load(Ordering::Relaxed) + self.failed()
    }

    /// `N lines answered (ok, failed, retried)`.
    fn counts(&self) -> String {
        format!(
            "{} lines answered: {} ok, {} failed, {} retried",
            self.written(),
            self.ok.load(Ordering::Relaxed),
            self.failed(),
            self.retried.load(Ordering::Relaxed)
        )
    }

    /// The summary line, after `elapsed`.
    pub(crate) fn summary(&self, elapsed: Duration) -> String {
        let seconds = elapsed.as_secs_f64();
        let rate = if seconds > 0.0 {
            self.written() as f64 / seconds
        } else {
            0.0
        };
        let mut text = format!("{} in {seconds:.2} s ({rate:.0} lines/s)", self.counts());
        let resumed = self.resumed.load(Ordering::Relaxed);
        if resumed > 0 {
            text.push_str(&format!("; {resumed} answered by an earlier run"));
        }
        text
    }
}

/// The progress display.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Starts showing progress on standard error, as `options` and the terminal say.
    /// `input_size`: the input's length, when known (for the bar and the ETA).
    pub(crate) fn start(options: &Options, input_size: Option<u64>, counters: Arc<Counters>) -> Progress {
        if options.quiet {
            return Progress { bar: None, task: None };
        }
        let started = Instant::now();
        if !std::io::stderr().is_terminal() {
            let task = tokio::spawn(async move {
                let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + PLAIN_EVERY, PLAIN_EVERY);
                loop {
                    ticks.tick().await;
                    let bytes = counters.bytes_read.load(Ordering::Relaxed);
                    let share = match input_size {
                        Some(size) if size > 0 => {
                            format!(", {:.0}% of the input read", 100.0 * bytes as f64 / size as f64)
                        }
                        _ => String::new(),
                    };
                    eprintln!("tensorplug infer: {}{share}", counters.summary(started.elapsed()));
                }
            });
            return Progress {
                bar: None,
                task: Some(task),
            };
        }
        let bar = match input_size {
            Some(size) => ProgressBar::new(size).with_style(
                ProgressStyle::with_template(
                    "{spinner} {elapsed_precise} [{wide_bar}] {percent:>3}% ETA {eta} | {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {elapsed_precise} | {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        let shown = bar.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(BAR_TICK);
            loop {
                ticks.tick().await;
                shown.set_position(counters.bytes_read.load(Ordering::Relaxed));
                let seconds = started.elapsed().as_secs_f64();
                let rate = if seconds > 0.0 {
                    counters.written() as f64 / seconds
                } else {
                    0.0
                };
                shown.set_message(format!("{} | {rate:.0} lines/s", counters.counts()));
                shown.tick();
            }
        });
        Progress {
            bar: Some(bar),
            task: Some(task),
        }
    }

    /// Prints a line on standard error without garbling the bar (always, even quiet).
    pub(crate) fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Stops the display and clears the bar.
    pub(crate) fn finish(&self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_lines_and_their_rate() {
        let counters = Counters::default();
        counters.line_written(true);
        counters.line_written(true);
        counters.line_written(false);
        counters.line_retried();
        counters.set_resumed(5);
        assert_eq!(
            counters.summary(Duration::from_secs(2)),
            "3 lines answered: 2 ok, 1 failed, 1 retried in 2.00 s (2 lines/s); 5 answered by an earlier run"
        );
    }
}
