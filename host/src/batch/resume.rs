//! `--resume`: reading back what an earlier run wrote to OUTPUT, keeping one successful
//! answer per line there, and the set of lines it answers (which the reader skips).

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;

use super::line_reader::{LineReader, RawLine};

/// OUTPUT could not be read back or rewritten.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ResumeError(String);

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
struct WrittenLine {
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
    let line: WrittenLine = serde_json::from_slice(text).ok()?;
    let index = line.parameters?.batch_index?;
    (line.outputs.is_some() && line.error.is_none() && index < MAX_RESUMED_INDEX).then_some(index)
}

/// Longest answer line `--resume` reads back.
const MAX_ANSWER_LINE_BYTES: usize = 1 << 30;

/// Reads OUTPUT (streaming: only the set of answered lines is kept) and keeps in it only
/// the first successful answer of each line, so that after the run it holds exactly one
/// answer per input line. OUTPUT is rewritten (through a temporary file beside it, then
/// renamed) only when something has to go.
pub(crate) fn resume_scan(path: &Path) -> Result<ResumeState, ResumeError> {
    let failed = |what: &str, e: std::io::Error| ResumeError(format!("{what} {}: {e}", path.display()));
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ResumeState::default()),
        Err(e) => return Err(failed("reading", e)),
    };
    let length = file.metadata().map_err(|e| failed("reading", e))?.len();
    let mut state = ResumeState::default();
    let mut reader = LineReader::new(Box::new(BufReader::new(file)), MAX_ANSWER_LINE_BYTES);
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
    let mut reader = LineReader::new(Box::new(BufReader::new(source)), MAX_ANSWER_LINE_BYTES);
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
