//! Reading the input: lines of at most `--max-line-bytes` (a longer line is skipped
//! without being held, and answered as a failed line), each parsed into a request by the
//! protocol's own decoder; lines OUTPUT already answers (`--resume`) are skipped unparsed,
//! and so are blank lines (they count for line numbers and `batch_index` all the same).
//!
//! Runs on a thread of its own (file and standard-input reads block), handing lines to
//! the workers and invalid lines' answers straight to the writer. Each line first takes
//! a permit of the reorder window, so the reader runs at most a window ahead of the
//! writer.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};

use super::line::{AnswerLine, Line};
use super::line_reader::{LineReader, RawLine};
use super::output;
use super::progress::Counters;
use super::resume::DoneSet;
use super::stop::Stop;
use super::transport::ModelInfo;
use crate::protocol::decode_request;

/// Where the requests come from.
pub(crate) enum InputSource {
    Stdin,
    File { file: std::fs::File, size: Option<u64> },
}

impl InputSource {
    /// Opens `path` (`-`: standard input).
    pub(crate) fn open(path: &Path) -> std::io::Result<InputSource> {
        if path == Path::new("-") {
            return Ok(InputSource::Stdin);
        }
        let file = std::fs::File::open(path)?;
        let metadata = file.metadata()?;
        if metadata.is_dir() {
            return Err(std::io::Error::other("is a directory"));
        }
        let size = metadata.is_file().then_some(metadata.len());
        Ok(InputSource::File { file, size })
    }

    /// The input's length in bytes, when it is a regular file.
    pub(crate) fn size(&self) -> Option<u64> {
        match self {
            InputSource::Stdin => None,
            InputSource::File { size, .. } => *size,
        }
    }

    /// Its lines, each at most `cap` bytes held.
    pub(crate) fn into_lines(self, cap: usize) -> LineReader {
        LineReader::new(self.into_reader(), cap)
    }

    fn into_reader(self) -> Box<dyn BufRead + Send> {
        const BUFFER: usize = 256 * 1024;
        match self {
            InputSource::Stdin => Box::new(BufReader::with_capacity(BUFFER, std::io::stdin())),
            InputSource::File { file, .. } => Box::new(BufReader::with_capacity(BUFFER, file)),
        }
    }
}

/// What the reader hands its lines to.
pub(crate) struct ReadContext {
    pub info: ModelInfo,
    /// Lines OUTPUT already answers (`--resume`), by index.
    pub done: DoneSet,
    /// The reorder window: one permit per line in the program.
    pub permits: Arc<Semaphore>,
    pub lines: mpsc::Sender<Line>,
    /// Invalid lines' answers go straight to the writer.
    pub invalid: mpsc::Sender<AnswerLine>,
    pub stop: Arc<Stop>,
    pub counters: Arc<Counters>,
    pub runtime: tokio::runtime::Handle,
}

/// Reads every line until the end (or a stop), in order. Runs on a blocking thread.
pub(crate) fn read_lines(mut reader: LineReader, context: ReadContext) -> std::io::Result<()> {
    let mut seq: u64 = 0;
    while !context.stop.requested() {
        let Some((number, raw)) = reader.next_line()? else {
            break;
        };
        context.counters.set_bytes_read(reader.consumed());
        let index = number - 1;
        if context.done.contains(index) {
            continue;
        }
        if let RawLine::Text(text) = &raw {
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
        }
        let permit = context.runtime.block_on(async {
            tokio::select! {
                permit = context.permits.clone().acquire_owned() => permit.ok(),
                () = context.stop.wait() => None,
            }
        });
        let Some(permit) = permit else {
            break;
        };
        let parsed = match raw {
            RawLine::Text(text) => decode_request(&text, None).map_err(|e| e.to_string()),
            RawLine::TooLong(length) => Err(format!(
                "the line is {length} bytes, more than --max-line-bytes ({})",
                reader.cap()
            )),
        };
        context.counters.line_read();
        let sent = match parsed {
            Ok(request) => {
                let line = Line::new(seq, index, request, permit);
                context.runtime.block_on(context.lines.send(line)).is_ok()
            }
            Err(reason) => {
                let message = format!("line {number}: {reason}");
                tracing::info!("{message}");
                let answer = output::invalid_line(&context.info, seq, index, &message, permit);
                context.runtime.block_on(context.invalid.send(answer)).is_ok()
            }
        };
        if !sent {
            // The workers or the writer are gone (an output error): nothing more to do.
            break;
        }
        seq += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_report_their_size_and_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, b"{}\n").unwrap();
        assert_eq!(InputSource::open(&path).unwrap().size(), Some(3));
        assert!(InputSource::open(dir.path()).is_err());
        assert!(InputSource::open(&dir.path().join("missing")).is_err());
    }
}
