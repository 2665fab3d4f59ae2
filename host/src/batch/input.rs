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

use super::merge::Line;
use super::output::{self, Answered, DoneSet};
use super::progress::Counters;
use super::transport::ModelInfo;
use super::Stop;
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

    fn into_reader(self) -> Box<dyn BufRead + Send> {
        const BUFFER: usize = 256 * 1024;
        match self {
            InputSource::Stdin => Box::new(BufReader::with_capacity(BUFFER, std::io::stdin())),
            InputSource::File { file, .. } => Box::new(BufReader::with_capacity(BUFFER, file)),
        }
    }
}

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RawLine {
    /// Its bytes, without the line ending (`\n` or `\r\n`).
    Text(Vec<u8>),
    /// Longer than the cap: its length (its bytes were skipped, not kept).
    TooLong(u64),
}

/// Lines of a byte stream, each at most `cap` bytes held.
pub(crate) struct LineReader {
    inner: Box<dyn BufRead + Send>,
    cap: usize,
    /// Lines returned so far (the last one's number).
    number: u64,
    /// Bytes consumed so far.
    consumed: u64,
}

impl LineReader {
    pub(crate) fn new(source: InputSource, cap: usize) -> Self {
        Self::from_reader(source.into_reader(), cap)
    }

    pub(crate) fn from_reader(inner: Box<dyn BufRead + Send>, cap: usize) -> Self {
        LineReader {
            inner,
            cap,
            number: 0,
            consumed: 0,
        }
    }

    /// Bytes read so far.
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The next line and its number (from 1), or `None` at the end.
    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<(u64, RawLine)>> {
        let mut line = Vec::new();
        let mut length: u64 = 0;
        let mut seen_any = false;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                if !seen_any {
                    return Ok(None);
                }
                break;
            }
            seen_any = true;
            let (chunk, used, ended) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..at], at + 1, true),
                None => (available, available.len(), false),
            };
            length += chunk.len() as u64;
            if length <= self.cap as u64 {
                line.extend_from_slice(chunk);
            } else if !line.is_empty() {
                // Over the cap: nothing more is kept.
                line = Vec::new();
            }
            self.inner.consume(used);
            self.consumed += used as u64;
            if ended {
                break;
            }
        }
        self.number += 1;
        if length > self.cap as u64 {
            return Ok(Some((self.number, RawLine::TooLong(length))));
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(Some((self.number, RawLine::Text(line))))
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
    pub invalid: mpsc::Sender<Answered>,
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
                reader.cap
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

    fn lines(text: &'static [u8], cap: usize) -> Vec<(u64, RawLine)> {
        // A tiny buffer, so lines cross buffer boundaries.
        let inner = Box::new(BufReader::with_capacity(3, text));
        let mut reader = LineReader::from_reader(inner, cap);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(line);
        }
        assert_eq!(reader.consumed(), text.len() as u64);
        out
    }

    fn text(s: &str) -> RawLine {
        RawLine::Text(s.as_bytes().to_vec())
    }

    #[test]
    fn lines_are_split_numbered_and_capped() {
        assert_eq!(
            lines(b"ab\r\n\nlonger line\nlast", 6),
            vec![
                (1, text("ab")),
                (2, text("")),
                (3, RawLine::TooLong(11)),
                (4, text("last"))
            ]
        );
        assert_eq!(lines(b"x\n", 6), vec![(1, text("x"))]);
        assert_eq!(lines(b"", 6), vec![]);
        assert_eq!(
            lines(b"123456\n1234567", 6),
            vec![(1, text("123456")), (2, RawLine::TooLong(7))]
        );
    }

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
