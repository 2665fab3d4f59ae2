//! `tensorplug infer`: batch inference over a file of requests, one JSON object a line,
//! against a server (REST JSON, REST binary, gRPC, NATS JetStream) or in-process (the
//! same repository, batcher and pipeline as `serve`, with no socket); one answer line per
//! input line.
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
//! In-process, a worker does not merge: it sends each line of its group as its own
//! request, all at once, and the serving batcher stacks them (up to N × K in flight).
//!
//! Memory is bounded by the window: a line holds a permit from the moment it is read
//! until its answer is written, so at most `window` lines (their requests and answers)
//! are in the program at once, whatever the input's length; when the oldest line is
//! slow, the window fills and the reader waits.
//!
//! Modules, and whom each uses (no circle; none uses this one):
//!
//! - `job`: one run, step by step → every module below
//! - `interrupt`: Ctrl-C and SIGTERM, and the `--resume` hint → `progress`, `stop`
//! - `input`: reading and parsing lines → `line`, `line_reader`, `output`, `resume`,
//!   `transport`, `progress`, `stop`
//! - `worker`: one group of lines from request to answer lines → `line`, `group`,
//!   `merge`, `output`, `transport`, `retry`, `progress`, `random`, `stop`
//! - `output`: answer lines and the writer (the reorder window) → `line`, `transport`,
//!   `progress`
//! - `merge`: merging a group into one request, splitting its reply → `line`, `transport`
//! - `group`: groups of compatible lines for the workers → `line`
//! - `resume`: `--resume`'s reading back of OUTPUT → `line_reader`
//! - `transport`: REST, gRPC, NATS, in-process → `options`, `retry`
//! - `retry`: which failures are retried, and when → `random`
//! - `progress`: the progress display and the summary → `options`
//! - leaves: `options` (the flags), `line` (a line's types: `Line`, `LineOutcome`,
//!   `Resolved`, `AnswerLine`), `line_reader` (`LineReader`, `RawLine`), `stop`, `random`
//!
//! Exit status: [`EXIT_OK`] when every line succeeded, [`EXIT_FAILED_LINES`] when some
//! failed (each has its failed answer line), [`EXIT_SETUP`] on a usage or setup error
//! (nothing was inferred), [`EXIT_INTERRUPTED`] after Ctrl-C (or SIGTERM).

mod group;
mod input;
mod interrupt;
mod job;
mod line;
mod line_reader;
mod merge;
pub mod options;
mod output;
mod progress;
mod random;
mod resume;
mod retry;
mod stop;
pub mod transport;
mod worker;

pub use job::{run, BatchError, EXIT_FAILED_LINES, EXIT_INTERRUPTED, EXIT_OK, EXIT_SETUP};
pub use options::{Options, Target, TransportKind};
