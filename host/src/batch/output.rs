//! The output: answer lines, and the writer (in input order through the reorder window,
//! or in completion order).
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
//!
//! What an earlier run wrote is `resume`'s.

use std::collections::VecDeque;
use std::io::{BufWriter, Write};
use std::path::Path;

use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::line::{AnswerLine, LineOutcome, Resolved};
use super::progress::Counters;
use super::transport::ModelInfo;
use crate::model::outcome::ItemOutcome;
use crate::protocol::{
    encode_error_with, encode_multi_status_with, encode_response_with, AnswerHead, OutputOptions, ParameterValue,
    Parameters,
};

fn line_parameters(index: u64, inference_id: Option<&str>, attempts: u32) -> Parameters {
    let mut parameters = vec![(String::from("batch_index"), ParameterValue::Number(index.into()))];
    if let Some(id) = inference_id {
        parameters.push((String::from("inference_id"), ParameterValue::String(id.to_owned())));
    }
    parameters.push((String::from("attempts"), ParameterValue::Number(attempts.into())));
    parameters.into_iter().collect()
}

/// The answer line of a resolved line.
pub(crate) fn answer_line(info: &ModelInfo, resolved: Resolved) -> AnswerLine {
    let Resolved {
        line,
        outcome,
        attempts,
        inference_id,
        ..
    } = resolved;
    let parameters = line_parameters(line.index, Some(&inference_id), attempts);
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
    AnswerLine {
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
) -> AnswerLine {
    let parameters = line_parameters(index, None, 0);
    let head = AnswerHead {
        model_name: &info.name,
        model_version: &info.version,
        id: None,
        parameters: &parameters,
        status: Some(400),
    };
    AnswerLine {
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
    mut answers: mpsc::Receiver<AnswerLine>,
    ordered: bool,
    counters: &Counters,
) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(256 * 1024, sink.writer);
    let write = |out: &mut BufWriter<Box<dyn Write + Send>>, answer: AnswerLine| -> std::io::Result<()> {
        out.write_all(&answer.body)?;
        out.write_all(b"\n")?;
        counters.line_written(answer.ok);
        drop(answer.permit);
        Ok(())
    };
    // Answers of seq `next`, `next + 1`, ...: at most a window of them (each holds a permit).
    let mut next: u64 = 0;
    let mut held: VecDeque<Option<AnswerLine>> = VecDeque::new();
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
