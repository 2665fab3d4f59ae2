//! One `tensorplug infer` run, step by step: check the flags, open the input, reach the
//! model, read back OUTPUT (`--resume`), start the stages, wait for them (or a signal),
//! and report. How the stages work together is in the module docs of `batch`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, Mutex, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::group::LineGrouper;
use super::input::{self, InputSource, ReadContext};
use super::interrupt::{resume_command, wait_or_interrupt};
use super::line::AnswerLine;
use super::options::{Options, Target, TransportKind};
use super::output::{self, OutputSink};
use super::progress::{Counters, Progress};
use super::resume::{self, DoneSet, ResumeError, ResumeState};
use super::retry::RetryPolicy;
use super::stop::Stop;
use super::transport::{ModelInfo, SetupError, Transport};
use super::worker::Worker;
use crate::protocol::clip;
use crate::traces::JobTrace;

/// Every line succeeded.
pub const EXIT_OK: i32 = 0;
/// A usage or setup error: bad flags, an unreadable input, an unreachable server, a model
/// that is not served or does not load.
pub const EXIT_SETUP: i32 = 1;
/// The run finished, and some lines failed.
pub const EXIT_FAILED_LINES: i32 = 2;
/// Interrupted (SIGINT, SIGTERM): what was answered is written; `--resume` does the rest.
pub const EXIT_INTERRUPTED: i32 = 130;

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
    Resume(#[from] ResumeError),
    #[error(transparent)]
    Transport(#[from] SetupError),
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

async fn run_job(options: Options) -> Result<i32, BatchError> {
    check(&options)?;
    let started = Instant::now();
    let input = InputSource::open(&options.input).map_err(|source| BatchError::Input {
        path: display(&options.input),
        source,
    })?;
    let transport = Arc::new(Transport::connect(&options).await?);
    let trace = Arc::new(JobTrace::start(&options.model, transport.name()));
    if let Some(trace_id) = trace.trace_id() {
        eprintln!("tensorplug infer: trace {trace_id}");
    }
    let batch_size = batch_size(&options, transport.info());
    let resumed = resume(&options)?;
    let sink = OutputSink::open(&options.output, options.resume).map_err(|source| BatchError::Output {
        path: display(&options.output),
        source,
    })?;
    let counters = Arc::new(Counters::default());
    counters.set_resumed(resumed.answered);
    let progress = Progress::start(&options, input.size(), counters.clone());
    let stop = Arc::new(Stop::default());
    let shared = Shared {
        transport: transport.clone(),
        counters: counters.clone(),
        stop: stop.clone(),
        trace: trace.clone(),
    };
    let mut stages = Stages::start(&options, batch_size, input, sink, resumed.done, shared);
    let interrupted = wait_or_interrupt(&mut stages.workers, &stop, &progress).await;
    let (read, written) = stages.join().await;
    transport.close().await;
    if let Ok(trace) = Arc::try_unwrap(trace) {
        trace.finish(counters.written(), counters.failed());
    }
    progress.finish();
    report(&options, &counters, started, read, written, interrupted)
}

/// Lines per group: `--batch-size`, or 1 when the model takes no batch dimension (or,
/// over NATS, when nothing can tell whether it does).
fn batch_size(options: &Options, info: &ModelInfo) -> usize {
    if options.batch_size > 1 && !info.batches {
        let over_nats = matches!(
            options.target,
            Target::Server {
                transport: TransportKind::Nats,
                ..
            }
        );
        if over_nats {
            // Not the model's fault: NATS has no metadata route to ask it.
            tracing::info!("--batch-size has no effect over NATS: lines are sent one by one");
        } else {
            tracing::warn!(
                model = %clip(&options.model),
                "the model takes no batch dimension: lines are sent one by one (--batch-size ignored)"
            );
        }
        1
    } else {
        options.batch_size
    }
}

/// With `--resume`, what OUTPUT already answers (said on standard error); else nothing.
fn resume(options: &Options) -> Result<ResumeState, BatchError> {
    if !options.resume {
        return Ok(ResumeState::default());
    }
    let resumed = resume::resume_scan(&options.output)?;
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
    Ok(resumed)
}

/// What every stage shares.
struct Shared {
    transport: Arc<Transport>,
    counters: Arc<Counters>,
    stop: Arc<Stop>,
    trace: Arc<JobTrace>,
}

/// The running stages: the reader and the writer (threads), and the workers.
struct Stages {
    reader: JoinHandle<std::io::Result<()>>,
    writer: JoinHandle<std::io::Result<()>>,
    workers: JoinSet<()>,
}

impl Stages {
    /// Starts the writer, the reader and `--workers` workers, joined by channels a
    /// window deep.
    fn start(
        options: &Options,
        batch_size: usize,
        input: InputSource,
        sink: OutputSink,
        done: DoneSet,
        shared: Shared,
    ) -> Stages {
        let window = options
            .window
            .unwrap_or(4 * options.workers * batch_size)
            .max(batch_size)
            .max(1);
        let permits = Arc::new(Semaphore::new(window));
        let (line_tx, line_rx) = mpsc::channel(window);
        let (answer_tx, answer_rx) = mpsc::channel::<AnswerLine>(window);
        let writer = {
            let counters = shared.counters.clone();
            let ordered = !options.unordered;
            tokio::task::spawn_blocking(move || output::write_answers(sink, answer_rx, ordered, &counters))
        };
        let reader = {
            let lines = input.into_lines(options.max_line_bytes);
            let context = ReadContext {
                info: shared.transport.info().clone(),
                done,
                permits,
                lines: line_tx,
                invalid: answer_tx.clone(),
                stop: shared.stop.clone(),
                counters: shared.counters.clone(),
                runtime: tokio::runtime::Handle::current(),
            };
            tokio::task::spawn_blocking(move || input::read_lines(lines, context))
        };
        let grouper = Arc::new(Mutex::new(LineGrouper::new(line_rx, batch_size)));
        let mut workers = JoinSet::new();
        for _ in 0..options.workers {
            let worker = Worker {
                transport: shared.transport.clone(),
                policy: RetryPolicy::new(options.retries),
                stop: shared.stop.clone(),
                counters: shared.counters.clone(),
                answers: answer_tx.clone(),
                trace: shared.trace.clone(),
            };
            workers.spawn(worker.run(grouper.clone()));
        }
        Stages {
            reader,
            writer,
            workers,
        }
    }

    /// Waits for the reader and the writer (the workers are done): how each ended.
    async fn join(self) -> (std::io::Result<()>, std::io::Result<()>) {
        let read = self
            .reader
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        let written = self
            .writer
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        (read, written)
    }
}

/// The summary on standard error, and the exit status (or the read or write error).
fn report(
    options: &Options,
    counters: &Counters,
    started: Instant,
    read: std::io::Result<()>,
    written: std::io::Result<()>,
    interrupted: bool,
) -> Result<i32, BatchError> {
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

fn display(path: &Path) -> String {
    if path == Path::new("-") {
        String::from("standard input/output")
    } else {
        path.display().to_string()
    }
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
