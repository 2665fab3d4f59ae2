//! `tensorplug infer`: batch inference over a file of requests, one JSON object a line,
//! against a server (REST JSON, REST binary, gRPC) or in-process (the same repository,
//! batcher and pipeline as `serve`, with no socket); one answer line per input line.
//!
//! The pipeline, every stage joined by a bounded channel:
//!
//! ```text
//! reader (thread) ──► lines ──► N workers ──► answers ──► writer (thread)
//!   read, parse,                 each: take up to K           in input order through
//!   skip resumed lines,          compatible lines, merge,     the reorder window (or in
//!   take a window permit         send, retry, split back,     completion order), then
//!   └── invalid lines ──────────────────────────────────────► the permit goes back
//! ```
//!
//! Memory is bounded by the window: a line holds a permit from the moment it is read
//! until its answer is written, so at most `window` lines (their requests and answers)
//! are in the program at once, whatever the input's length; when the oldest line is
//! slow, the window fills and the reader waits.
//!
//! Files: `input` (reading and parsing lines), `merge` (micro-batching: merge and split),
//! `transport` (REST, gRPC, in-process), `retry` (which failures are retried, and when),
//! `worker` (one group of lines from request to answers), `output` (answer lines, the
//! reorder window, `--resume`), `progress` (the progress display and the summary).
//!
//! Exit status: [`EXIT_OK`] when every line succeeded, [`EXIT_FAILED_LINES`] when some
//! failed (each has its failed answer line), [`EXIT_SETUP`] on a usage or setup error
//! (nothing was inferred), [`EXIT_INTERRUPTED`] after Ctrl-C (or SIGTERM).

mod input;
mod merge;
mod output;
mod progress;
mod retry;
pub mod transport;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify, Semaphore};

pub use transport::TransportKind;

use crate::protocol::clip;
use input::{InputSource, LineReader};
use output::{Answered, OutputSink};
use progress::{Counters, Progress};
use retry::RetryPolicy;
use transport::Transport;
use worker::Worker;

/// Every line succeeded.
pub const EXIT_OK: i32 = 0;
/// A usage or setup error: bad flags, an unreadable input, an unreachable server, a model
/// that is not served or does not load.
pub const EXIT_SETUP: i32 = 1;
/// The run finished, and some lines failed.
pub const EXIT_FAILED_LINES: i32 = 2;
/// Interrupted (SIGINT, SIGTERM): what was answered is written; `--resume` does the rest.
pub const EXIT_INTERRUPTED: i32 = 130;

/// What `tensorplug infer` was asked to do (the command line's flags, checked).
#[derive(Clone, Debug)]
pub struct Options {
    pub model: String,
    pub model_version: Option<String>,
    /// The requests, one JSON object a line; `-` is standard input.
    pub input: PathBuf,
    /// Where the answers go, one a line; `-` is standard output.
    pub output: PathBuf,
    pub target: Target,
    /// Requests in flight at once.
    pub workers: usize,
    /// Retries of a line after its first attempt (connection errors, 503, 504).
    pub retries: u32,
    /// Most lines merged into one request.
    pub batch_size: usize,
    /// `Name: value` headers (gRPC: metadata) sent with every request.
    pub headers: Vec<String>,
    /// Longest wait for one request's answer.
    pub timeout: Duration,
    /// REST: send inputs and ask for outputs as binary tensor data.
    pub binary_data: bool,
    /// Write answers as they complete instead of in input order.
    pub unordered: bool,
    /// Skip the lines OUTPUT already answers successfully, and append the rest.
    pub resume: bool,
    /// Lines in the program at once (default: 4 × workers × batch size).
    pub window: Option<usize>,
    /// Longest input line; a longer one is answered as a failed line.
    pub max_line_bytes: usize,
    /// No progress display.
    pub quiet: bool,
}

/// Where the requests go.
#[derive(Clone, Debug)]
pub enum Target {
    /// A server: `host:port` or a URL.
    Server { url: String, transport: TransportKind },
    /// The repository's model, run in this process.
    InProcess {
        repository: PathBuf,
        /// The compile cache (None: compile afresh).
        cache_dir: Option<PathBuf>,
    },
}

/// Why a run could not start (or had to stop): a usage or setup error.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("{0}")]
    Usage(String),
    #[error("reading {path}: {source}")]
    Input {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Output {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--resume: {0}")]
    Resume(String),
    #[error(transparent)]
    Transport(#[from] transport::SetupError),
}

/// Runs a batch job and returns the process's exit status (see the module docs). Errors
/// are reported on standard error.
pub async fn run(options: Options) -> i32 {
    match run_job(options).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tensorplug infer: error: {error}");
            EXIT_SETUP
        }
    }
}

/// Shared by every stage: a request to stop (Ctrl-C), which each stage notices at its
/// next step.
#[derive(Default)]
pub(crate) struct Stop {
    requested: AtomicBool,
    notify: Notify,
}

impl Stop {
    pub(crate) fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub(crate) fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Resolves once a stop is requested.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.requested() {
                return;
            }
            notified.await;
        }
    }
}

fn display(path: &Path) -> String {
    if path == Path::new("-") {
        String::from("standard input/output")
    } else {
        path.display().to_string()
    }
}

async fn run_job(options: Options) -> Result<i32, BatchError> {
    check(&options)?;
    let started = Instant::now();
    let input = InputSource::open(&options.input).map_err(|source| BatchError::Input {
        path: display(&options.input),
        source,
    })?;
    let transport = Arc::new(Transport::connect(&options).await?);
    let info = transport.info().clone();
    let batch_size = if options.batch_size > 1 && !info.batches {
        tracing::warn!(
            model = %clip(&options.model),
            "the model takes no batch dimension: lines are sent one by one (--batch-size ignored)"
        );
        1
    } else {
        options.batch_size
    };
    let resumed = if options.resume {
        output::resume_scan(&options.output)?
    } else {
        output::ResumeState::default()
    };
    if resumed.answered > 0 || resumed.dropped > 0 {
        eprintln!(
            "tensorplug infer: resuming: {} lines already answered in {}{}",
            resumed.answered,
            display(&options.output),
            match resumed.dropped {
                0 => String::new(),
                n => format!(" ({n} failed or unreadable answer lines dropped, to be answered again)"),
            }
        );
    }
    let sink = OutputSink::open(&options.output, options.resume).map_err(|source| BatchError::Output {
        path: display(&options.output),
        source,
    })?;

    let window = options
        .window
        .unwrap_or(4 * options.workers * batch_size)
        .max(batch_size)
        .max(1);
    let counters = Arc::new(Counters::default());
    counters.set_resumed(resumed.answered);
    let stop = Arc::new(Stop::default());
    let permits = Arc::new(Semaphore::new(window));
    let (line_tx, line_rx) = mpsc::channel(window);
    let (answer_tx, answer_rx) = mpsc::channel::<Answered>(window);

    let progress = Progress::start(&options, input.size(), counters.clone());
    let writer = {
        let counters = counters.clone();
        let ordered = !options.unordered;
        tokio::task::spawn_blocking(move || output::write_answers(sink, answer_rx, ordered, &counters))
    };
    let reader = {
        let reader = LineReader::new(input, options.max_line_bytes);
        let context = input::ReadContext {
            info: info.clone(),
            done: resumed.done,
            permits: permits.clone(),
            lines: line_tx,
            invalid: answer_tx.clone(),
            stop: stop.clone(),
            counters: counters.clone(),
            runtime: tokio::runtime::Handle::current(),
        };
        tokio::task::spawn_blocking(move || input::read_lines(reader, context))
    };
    let batcher = Arc::new(tokio::sync::Mutex::new(merge::Batcher::new(line_rx, batch_size)));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..options.workers {
        let worker = Worker {
            transport: transport.clone(),
            policy: RetryPolicy::new(options.retries),
            stop: stop.clone(),
            counters: counters.clone(),
            answers: answer_tx.clone(),
        };
        workers.spawn(worker.run(batcher.clone()));
    }
    drop(answer_tx);

    let interrupted = wait_or_interrupt(&mut workers, &stop, &progress).await;
    let read = reader
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    let written = writer
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    transport.close().await;
    progress.finish();
    let read_error = read.err().map(|source| BatchError::Input {
        path: display(&options.input),
        source,
    });
    let write_error = written.err().map(|source| BatchError::Output {
        path: display(&options.output),
        source,
    });
    if let Some(error) = write_error.or(read_error) {
        // What was written stays; a resume picks up from there.
        eprintln!("tensorplug infer: {}", counters.summary(started.elapsed()));
        return Err(error);
    }
    eprintln!(
        "tensorplug infer: {}; answers in {}",
        counters.summary(started.elapsed()),
        display(&options.output)
    );
    if interrupted {
        eprintln!(
            "tensorplug infer: interrupted; the answers so far are in {}. To answer the rest, run:\n  {}",
            display(&options.output),
            resume_command()
        );
        return Ok(EXIT_INTERRUPTED);
    }
    Ok(if counters.failed() > 0 {
        EXIT_FAILED_LINES
    } else {
        EXIT_OK
    })
}

/// Flag combinations that cannot work.
fn check(options: &Options) -> Result<(), BatchError> {
    if options.model.is_empty() {
        return Err(BatchError::Usage("--model-name must not be empty".into()));
    }
    if options.resume && options.output == Path::new("-") {
        return Err(BatchError::Usage(
            "--resume reads OUTPUT back, so it needs a file, not standard output".into(),
        ));
    }
    if options.workers == 0 || options.batch_size == 0 {
        return Err(BatchError::Usage(
            "--workers and --batch-size must be at least 1".into(),
        ));
    }
    if options.timeout.is_zero() {
        return Err(BatchError::Usage("--timeout must be more than 0".into()));
    }
    Ok(())
}

/// Waits for the workers; on the first SIGINT/SIGTERM asks every stage to stop (no new
/// lines, no more retries; what is in flight finishes and is written), on the second
/// leaves at once. Whether it was interrupted.
async fn wait_or_interrupt(workers: &mut tokio::task::JoinSet<()>, stop: &Stop, progress: &Progress) -> bool {
    let mut signals = Signals::new();
    let mut interrupted = false;
    loop {
        tokio::select! {
            joined = workers.join_next() => {
                if joined.is_none() {
                    return interrupted;
                }
            }
            () = signals.next() => {
                if interrupted {
                    progress.println("tensorplug infer: stopping now; lines in flight will be answered by --resume");
                    // Their answers are dropped with them; the writer then writes what
                    // it has and finishes.
                    workers.abort_all();
                    while workers.join_next().await.is_some() {}
                    return true;
                }
                interrupted = true;
                stop.request();
                progress.println(
                    "tensorplug infer: interrupted: finishing the lines in flight (interrupt again to stop now)",
                );
            }
        }
    }
}

/// SIGINT and SIGTERM, as one stream.
struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        Signals {
            #[cfg(unix)]
            terminate: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        {
            let terminate = async {
                match &mut self.terminate {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = terminate => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// This run's command line with `--resume` added (if it is not there), quoted for a
/// POSIX shell.
fn resume_command() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--resume") {
        args.push("--resume".into());
    }
    args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// Random bits for jitter and request ids, without a generator crate: std's hasher
/// keys are seeded randomly per process (and stepped per `RandomState`).
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// A fresh request id, shaped like a version-4 UUID (as `mlserver infer` makes them).
pub(crate) fn new_inference_id() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inference_ids_look_like_uuids_and_differ() {
        let a = new_inference_id();
        let b = new_inference_id();
        assert_ne!(a, b);
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{a}");
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn the_resume_hint_quotes_what_a_shell_would_split() {
        assert_eq!(shell_quote("out.jsonl"), "out.jsonl");
        assert_eq!(shell_quote("my file"), "'my file'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
