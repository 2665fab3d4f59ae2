//! The plugin calls a traced batch makes, recorded on the thread that runs it.
//!
//! A batch runs synchronously on one thread (an instance thread, or a runtime thread on the
//! idle path), through layers that know nothing of traces: the runtime makes each plugin
//! call, the pipeline replaces trapped instances. While [`recording`] runs a traced batch,
//! those layers note what they did here; the batch's spans are made from the record
//! afterwards (`super::batch`). Nothing is recorded, and each note costs one thread-local
//! read, when the batch is not traced.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

/// Most calls one batch records: bisection makes at most `2·k·⌈log2 n⌉` extra calls, and a
/// hostile plugin that fails every call must not grow a span tree without bound.
pub const MAX_CALLS: usize = 64;
/// Most `wasi:nn` computes recorded per call.
pub const MAX_COMPUTES: usize = 16;
/// Most plugin log lines recorded per call (OpenTelemetry's default bound on a span's
/// events), and bytes of them per batch: the log budget of a call lets 200 lines of up to
/// 8 KiB through, which 64 calls would make 100 MiB.
pub const MAX_LOG_LINES: usize = 128;
pub const MAX_LOG_BYTES: usize = 1 << 20;

/// How a call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallEnd {
    /// The plugin answered (some items may have failed).
    Answered,
    /// It trapped (or broke its time limit): its instance is dropped.
    Trapped { message: String, deadline: bool },
}

/// One plugin call of a traced batch.
#[derive(Clone, Debug)]
pub struct CallRecord {
    /// `preprocess`, `predict` or `postprocess`.
    pub stage: &'static str,
    pub started: SystemTime,
    pub took: Duration,
    /// Items the call was given.
    pub items: usize,
    /// Items it failed (all of them when it trapped).
    pub failed: usize,
    pub end: CallEnd,
    /// Whether its instance was replaced after it.
    pub replaced: bool,
    /// The plugin's log lines, as the per-call log budget let them through, within
    /// [`MAX_LOG_LINES`] and the batch's [`MAX_LOG_BYTES`].
    pub logs: Vec<LogLine>,
    /// Lines past those bounds, not recorded.
    pub logs_left_out: usize,
    /// Its `wasi:nn` graph computes.
    pub computes: Vec<ComputeRecord>,
}

/// A plugin's log line.
#[derive(Clone, Debug)]
pub struct LogLine {
    pub at: SystemTime,
    pub level: &'static str,
    pub message: String,
}

/// One `wasi:nn` compute inside a call.
#[derive(Clone, Debug)]
pub struct ComputeRecord {
    pub started: SystemTime,
    pub took: Duration,
    /// The error it ended in, if any.
    pub error: Option<String>,
}

/// What a traced batch's calls were.
#[derive(Debug, Default)]
pub struct Journal {
    pub calls: Vec<CallRecord>,
    /// Calls past [`MAX_CALLS`], not recorded.
    pub calls_left_out: usize,
    /// A call under way (between [`call_started`] and [`call_ended`]).
    open: Option<CallRecord>,
    /// Bytes of log lines recorded so far.
    log_bytes: usize,
}

thread_local! {
    static JOURNAL: RefCell<Option<Journal>> = const { RefCell::new(None) };
}

/// Runs `batch` with its plugin calls recorded; what it returned, and the record.
pub fn recording<R>(batch: impl FnOnce() -> R) -> (R, Journal) {
    // A batch never runs inside another on one thread; whatever an earlier panic left is
    // dropped.
    JOURNAL.with(|journal| *journal.borrow_mut() = Some(Journal::default()));
    let result = batch();
    let journal = JOURNAL.with(|journal| journal.borrow_mut().take()).unwrap_or_default();
    (result, journal)
}

/// Whether a traced batch is being recorded on this thread (what the notes below would
/// keep); callers skip the work of a note when not.
pub fn is_recording() -> bool {
    JOURNAL.with(|journal| journal.try_borrow().is_ok_and(|journal| journal.is_some()))
}

fn with_journal(note: impl FnOnce(&mut Journal)) {
    JOURNAL.with(|journal| {
        if let Ok(mut journal) = journal.try_borrow_mut() {
            if let Some(journal) = journal.as_mut() {
                note(journal);
            }
        }
    });
}

/// A call of `stage` starts (on this thread).
pub fn call_started(stage: &'static str) {
    with_journal(|journal| {
        journal.open = Some(CallRecord {
            stage,
            started: SystemTime::now(),
            took: Duration::ZERO,
            items: 0,
            failed: 0,
            end: CallEnd::Answered,
            replaced: false,
            logs: Vec::new(),
            logs_left_out: 0,
            computes: Vec::new(),
        });
    });
}

/// The call under way ended after `took`, given `items`, failing `failed` of them.
pub fn call_ended(took: Duration, items: usize, failed: usize, end: CallEnd) {
    with_journal(|journal| {
        let Some(mut call) = journal.open.take() else { return };
        call.took = took;
        call.items = items;
        call.failed = failed;
        call.end = end;
        if journal.calls.len() < MAX_CALLS {
            journal.calls.push(call);
        } else {
            journal.calls_left_out += 1;
        }
    });
}

/// The call under way logged a line (one the plugin's log budget let through).
pub fn log(level: &'static str, message: &str) {
    with_journal(|journal| {
        let Some(call) = journal.open.as_mut() else { return };
        if call.logs.len() >= MAX_LOG_LINES || journal.log_bytes + message.len() > MAX_LOG_BYTES {
            call.logs_left_out += 1;
            return;
        }
        journal.log_bytes += message.len();
        call.logs.push(LogLine {
            at: SystemTime::now(),
            level,
            message: message.to_owned(),
        });
    });
}

/// The call under way ran a `wasi:nn` compute.
pub fn compute(started: SystemTime, took: Duration, error: Option<String>) {
    with_journal(|journal| {
        if let Some(call) = journal.open.as_mut() {
            if call.computes.len() < MAX_COMPUTES {
                call.computes.push(ComputeRecord { started, took, error });
            }
        }
    });
}

/// The instance of the latest call was replaced (it trapped).
pub fn replaced() {
    with_journal(|journal| {
        if let Some(call) = journal.calls.last_mut() {
            call.replaced = true;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_noted_outside_a_recording() {
        call_started("predict");
        log("info", "not kept");
        call_ended(Duration::from_millis(1), 1, 0, CallEnd::Answered);
        let ((), journal) = recording(|| {});
        assert!(journal.calls.is_empty());
    }

    #[test]
    fn a_recording_keeps_each_call_with_its_lines_and_computes() {
        let ((), journal) = recording(|| {
            call_started("predict");
            log("warn", "hello");
            compute(SystemTime::now(), Duration::from_micros(5), None);
            call_ended(Duration::from_millis(2), 4, 1, CallEnd::Answered);
            call_started("postprocess");
            call_ended(
                Duration::from_millis(1),
                3,
                3,
                CallEnd::Trapped {
                    message: "unreachable".into(),
                    deadline: false,
                },
            );
            replaced();
        });
        assert_eq!(journal.calls.len(), 2);
        let predict = &journal.calls[0];
        assert_eq!((predict.stage, predict.items, predict.failed), ("predict", 4, 1));
        assert_eq!(predict.logs[0].message, "hello");
        assert_eq!(predict.computes.len(), 1);
        assert!(!predict.replaced);
        assert!(journal.calls[1].replaced);
    }

    #[test]
    fn a_batch_that_calls_without_end_records_at_most_its_bound() {
        let ((), journal) = recording(|| {
            for _ in 0..MAX_CALLS + 10 {
                call_started("predict");
                for _ in 0..MAX_COMPUTES * 2 {
                    compute(SystemTime::now(), Duration::ZERO, None);
                }
                call_ended(Duration::ZERO, 2, 2, CallEnd::Answered);
            }
        });
        assert_eq!(journal.calls.len(), MAX_CALLS);
        assert_eq!(journal.calls_left_out, 10);
        assert!(journal.calls.iter().all(|c| c.computes.len() == MAX_COMPUTES));
    }

    #[test]
    fn a_flood_of_log_lines_is_recorded_within_its_bounds() {
        let line = "x".repeat(8 * 1024);
        let ((), journal) = recording(|| {
            for _ in 0..MAX_CALLS {
                call_started("predict");
                for _ in 0..200 {
                    log("info", &line);
                }
                call_ended(Duration::ZERO, 1, 0, CallEnd::Answered);
            }
        });
        let lines: usize = journal.calls.iter().map(|c| c.logs.len()).sum();
        let bytes: usize = journal
            .calls
            .iter()
            .flat_map(|c| &c.logs)
            .map(|l| l.message.len())
            .sum();
        assert!(journal.calls.iter().all(|c| c.logs.len() <= MAX_LOG_LINES));
        assert!(bytes <= MAX_LOG_BYTES, "{bytes} bytes of log lines kept");
        let left_out: usize = journal.calls.iter().map(|c| c.logs_left_out).sum();
        assert_eq!(lines + left_out, MAX_CALLS * 200);
    }
}
