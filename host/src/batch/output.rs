//! The output: answer lines, the writer (in input order through the reorder window, or
//! in completion order), and `--resume`'s reading of what an earlier run wrote.
//!
//! An answer line is the V2 answer the line would have got over REST, written by the
//! protocol's own encoders, with `parameters` added as `mlserver infer` writes them:
//!
//! ```json
//! {"model_name":"digits","model_version":"1","id":"7","parameters":{"batch_index":6,
//!  "inference_id":"7","attempts":1},"outputs":[{"name":"label",...}]}
//! {"model_name":"digits","model_version":"1","parameters":{"batch_index":7,
//!  "inference_id":"…","attempts":1},"status":400,"error":"input-0[5]: pixel value 99 ..."}
//! ```
//!
//! `batch_index` is the input line's number − 1; `inference_id` the id of the request
//! that carried it (its own `id` when it went alone with one, else a fresh UUID-shaped id
//! shared by the lines merged with it; absent when nothing was sent); `attempts` the
//! requests that carried it. A failed line has `status` and `error` instead of
//! `outputs`; a multi-item line whose items partly failed has `status: 207`, `error` and
//! `results`, as a 207 body.

use std::collections::VecDeque;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::input::{LineReader, RawLine};
use super::merge::LineOutcome;
use super::progress::Counters;
use super::transport::ModelInfo;
use super::worker::Resolved;
use super::BatchError;
use crate::model::outcome::ItemOutcome;
use crate::protocol::{
    encode_error_with, encode_multi_status_with, encode_response_with, AnswerHead, OutputOptions, ParameterValue,
    Parameters,
};

/// One line's answer, encoded, on its way to the writer.
pub(crate) struct Answered {
    pub seq: u64,
    /// The answer line, without its newline.
    pub body: Vec<u8>,
    pub ok: bool,
    /// Given back once the line is written.
    pub permit: OwnedSemaphorePermit,
}

fn line_parameters(index: u64, inference_id: Option<&str>, attempts: u32) -> Parameters {
    let mut parameters = vec![(String::from("batch_index"), ParameterValue::Number(index.into()))];
    if let Some(id) = inference_id {
        parameters.push((String::from("inference_id"), ParameterValue::String(id.to_owned())));
    }
    parameters.push((String::from("attempts"), ParameterValue::Number(attempts.into())));
    parameters.into_iter().collect()
}

/// The answer line of a resolved line.
pub(crate) fn answer_line(info: &ModelInfo, resolved: Resolved) -> Answered {
    let Resolved {
        pending,
        outcome,
        inference_id,
    } = resolved;
    let line = pending.line;
    let parameters = line_parameters(line.index, Some(&inference_id), pending.attempts);
    let id = line.request.id.as_deref();
    let head = |model_name: &'_ str, model_version: &'_ str| -> (String, String) {
        let name = if model_name.is_empty() { &info.name } else { model_name };
        let version = if model_name.is_empty() {
            &info.version
        } else {
            model_version
        };
        (name.to_owned(), version.to_owned())
    };
    // Answer lines are JSON whatever the request asked: only its choice of outputs counts.
    let options = OutputOptions {
        requested: line.request.outputs.iter().map(|o| (o.name.clone(), false)).collect(),
        binary_by_default: false,
    };
    let (body, ok) = match &outcome {
        LineOutcome::Success {
            model_name,
            model_version,
            outputs,
        } => {
            let (name, version) = head(model_name, model_version);
            let head = AnswerHead {
                model_name: &name,
                model_version: &version,
                id,
                parameters: &parameters,
                status: None,
            };
            (encode_response_with(&head, outputs, &options).body, true)
        }
        LineOutcome::Items {
            model_name,
            model_version,
            results,
        } => {
            let (name, version) = head(model_name, model_version);
            let head = AnswerHead {
                model_name: &name,
                model_version: &version,
                id,
                parameters: &parameters,
                status: Some(207),
            };
            let results: Vec<ItemOutcome> = results
                .iter()
                .map(|r| r.clone().map(|item| options.filter(item)))
                .collect();
            (encode_multi_status_with(&head, &results), false)
        }
        LineOutcome::Failure { status, message } => {
            let head = AnswerHead {
                model_name: &info.name,
                model_version: &info.version,
                id,
                parameters: &parameters,
                status: Some(*status),
            };
            (encode_error_with(&head, message), false)
        }
    };
    Answered {
        seq: line.seq,
        body,
        ok,
        permit: line.permit,
    }
}

/// The answer line of an input line that is not a valid request (status 400; nothing was
/// sent, so no `inference_id`, and 0 attempts).
pub(crate) fn invalid_line(
    info: &ModelInfo,
    seq: u64,
    index: u64,
    message: &str,
    permit: OwnedSemaphorePermit,
) -> Answered {
    let parameters = line_parameters(index, None, 0);
    let head = AnswerHead {
        model_name: &info.name,
        model_version: &info.version,
        id: None,
        parameters: &parameters,
        status: Some(400),
    };
    Answered {
        seq,
        body: encode_error_with(&head, message),
        ok: false,
        permit,
    }
}

/// Where answers are written.
pub(crate) struct OutputSink {
    writer: Box<dyn Write + Send>,
}

impl OutputSink {
    /// `path` (`-`: standard output), created or emptied, or appended to (`--resume`).
    pub(crate) fn open(path: &Path, append: bool) -> std::io::Result<OutputSink> {
        if path == Path::new("-") {
            return Ok(OutputSink {
                writer: Box::new(std::io::stdout()),
            });
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)?;
        Ok(OutputSink { writer: Box::new(file) })
    }
}

/// Writes answers as they come (`ordered`: in input order, holding early answers until
/// the lines before them are written) until every sender is gone. Flushes whenever it has
/// nothing more to write, so that an interrupted run leaves whole lines behind. Runs on a
/// blocking thread.
pub(crate) fn write_answers(
    sink: OutputSink,
    mut answers: mpsc::Receiver<Answered>,
    ordered: bool,
    counters: &Counters,
) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(256 * 1024, sink.writer);
    let write = |out: &mut BufWriter<Box<dyn Write + Send>>, answer: Answered| -> std::io::Result<()> {
        out.write_all(&answer.body)?;
        out.write_all(b"\n")?;
        counters.line_written(answer.ok);
        drop(answer.permit);
        Ok(())
    };
    // Answers of seq `next`, `next + 1`, ...: at most a window of them (each holds a permit).
    let mut next: u64 = 0;
    let mut held: VecDeque<Option<Answered>> = VecDeque::new();
    while let Some(answer) = answers.blocking_recv() {
        if ordered {
            let at = usize::try_from(answer.seq.saturating_sub(next)).unwrap_or(usize::MAX);
            if held.len() <= at {
                held.resize_with(at + 1, || None);
            }
            held[at] = Some(answer);
            while held.front().is_some_and(Option::is_some) {
                if let Some(Some(answer)) = held.pop_front() {
                    write(&mut out, answer)?;
                }
                next += 1;
            }
        } else {
            write(&mut out, answer)?;
        }
        if answers.is_empty() {
            out.flush()?;
        }
    }
    // Gaps are only left when the run was stopped at once: what is held is still written
    // (the missing lines are what `--resume` answers).
    for answer in held.into_iter().flatten() {
        write(&mut out, answer)?;
    }
    out.flush()
}

/// Line indices, as a bitset.
#[derive(Clone, Debug, Default)]
pub(crate) struct DoneSet {
    words: Vec<u64>,
}

impl DoneSet {
    pub(crate) fn contains(&self, index: u64) -> bool {
        usize::try_from(index / 64)
            .ok()
            .and_then(|word| self.words.get(word))
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    /// Adds `index`; whether it was new.
    fn insert(&mut self, index: u64) -> bool {
        let Ok(word) = usize::try_from(index / 64) else {
            return false;
        };
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        let bit = 1 << (index % 64);
        let new = self.words[word] & bit == 0;
        self.words[word] |= bit;
        new
    }
}

/// Largest `batch_index` `--resume` takes from OUTPUT (its bitset then takes 512 MiB);
/// a line with a larger one is not this program's and is dropped.
const MAX_RESUMED_INDEX: u64 = 1 << 32;

/// What an earlier run left in OUTPUT.
#[derive(Debug, Default)]
pub(crate) struct ResumeState {
    /// Lines with a successful answer.
    pub done: DoneSet,
    /// How many.
    pub answered: u64,
    /// Answer lines removed from OUTPUT: failed ones (answered again now), unreadable
    /// ones (a line cut short when the run was killed), repeats.
    pub dropped: u64,
}

/// The parts of an answer line `--resume` reads.
#[derive(serde::Deserialize)]
struct AnswerLine {
    #[serde(default)]
    parameters: Option<LineParameters>,
    #[serde(default)]
    outputs: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct LineParameters {
    #[serde(default)]
    batch_index: Option<u64>,
}

/// The index of a successful answer line, or `None` for any other line.
fn successful_index(text: &[u8]) -> Option<u64> {
    let line: AnswerLine = serde_json::from_slice(text).ok()?;
    let index = line.parameters?.batch_index?;
    (line.outputs.is_some() && line.error.is_none() && index < MAX_RESUMED_INDEX).then_some(index)
}

/// Longest answer line `--resume` reads back.
const MAX_ANSWER_LINE_BYTES: usize = 1 << 30;

/// Reads OUTPUT (streaming: only the set of answered lines is kept) and keeps in it only
/// the first successful answer of each line, so that after the run it holds exactly one
/// answer per input line. OUTPUT is rewritten (through a temporary file beside it, then
/// renamed) only when something has to go.
pub(crate) fn resume_scan(path: &Path) -> Result<ResumeState, BatchError> {
    let failed = |what: &str, e: std::io::Error| BatchError::Resume(format!("{what} {}: {e}", path.display()));
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ResumeState::default()),
        Err(e) => return Err(failed("reading", e)),
    };
    let length = file.metadata().map_err(|e| failed("reading", e))?.len();
    let mut state = ResumeState::default();
    let mut reader = LineReader::from_reader(Box::new(BufReader::new(file)), MAX_ANSWER_LINE_BYTES);
    while let Some((_, raw)) = reader.next_line().map_err(|e| failed("reading", e))? {
        let RawLine::Text(text) = raw else {
            state.dropped += 1;
            continue;
        };
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match successful_index(&text) {
            Some(index) if state.done.insert(index) => state.answered += 1,
            _ => state.dropped += 1,
        }
    }
    let ends_cleanly = length == 0 || last_byte(path).map_err(|e| failed("reading", e))? == Some(b'\n');
    if state.dropped > 0 || !ends_cleanly {
        rewrite(path).map_err(|e| failed("rewriting", e))?;
    }
    Ok(state)
}

fn last_byte(path: &Path) -> std::io::Result<Option<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(None);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut byte = [0u8];
    file.read_exact(&mut byte)?;
    Ok(Some(byte[0]))
}

/// Copies OUTPUT's first successful answer of each line to a temporary file and puts it
/// in OUTPUT's place.
fn rewrite(path: &Path) -> std::io::Result<()> {
    let mut temporary = PathBuf::from(path);
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".resume-tmp");
    temporary.set_file_name(name);
    let source = std::fs::File::open(path)?;
    let mut reader = LineReader::from_reader(Box::new(BufReader::new(source)), MAX_ANSWER_LINE_BYTES);
    let mut out = BufWriter::new(std::fs::File::create(&temporary)?);
    let mut kept = DoneSet::default();
    while let Some((_, raw)) = reader.next_line()? {
        let RawLine::Text(text) = raw else {
            continue;
        };
        if successful_index(&text).is_some_and(|index| kept.insert(index)) {
            out.write_all(&text)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    out.get_ref().sync_all()?;
    drop(out);
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_done_set_is_a_bitset() {
        let mut set = DoneSet::default();
        assert!(!set.contains(0));
        assert!(set.insert(0) && set.insert(64) && set.insert(1000));
        assert!(!set.insert(64));
        assert!(set.contains(0) && set.contains(64) && set.contains(1000));
        assert!(!set.contains(1) && !set.contains(65) && !set.contains(u64::MAX));
        assert_eq!(set.words.len(), 1000 / 64 + 1);
    }

    #[test]
    fn resume_keeps_one_successful_answer_per_line_and_drops_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let ok = |i: u64| format!(r#"{{"model_name":"m","parameters":{{"batch_index":{i}}},"outputs":[]}}"#);
        let failed =
            |i: u64| format!(r#"{{"model_name":"m","parameters":{{"batch_index":{i}}},"status":503,"error":"busy"}}"#);
        let text = [ok(0), failed(1), ok(2), ok(0), String::new(), ok(3)].join("\n") + "\n" + &ok(4)[..20];
        std::fs::write(&path, text).unwrap();
        let state = resume_scan(&path).unwrap();
        assert_eq!(state.answered, 3, "0, 2 and 3; 4 is cut short");
        assert!(state.done.contains(0) && state.done.contains(2) && state.done.contains(3));
        assert!(!state.done.contains(1) && !state.done.contains(4));
        assert_eq!(state.dropped, 3, "the failure, the repeat, the cut line");
        let kept = std::fs::read_to_string(&path).unwrap();
        assert_eq!(kept, [ok(0), ok(2), ok(3)].join("\n") + "\n");
        // Nothing to drop: left as it is.
        let again = resume_scan(&path).unwrap();
        assert_eq!((again.answered, again.dropped), (3, 0));
        assert!(resume_scan(&dir.path().join("missing.jsonl")).unwrap().answered == 0);
    }
}
