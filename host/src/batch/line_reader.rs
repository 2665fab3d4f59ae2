//! Lines of a byte stream, each at most a cap of bytes held (a longer line is skipped,
//! not kept): the input's lines, and OUTPUT's when `--resume` reads it back.

use std::io::BufRead;

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
    pub(crate) fn new(inner: Box<dyn BufRead + Send>, cap: usize) -> Self {
        LineReader {
            inner,
            cap,
            number: 0,
            consumed: 0,
        }
    }

    /// The most bytes of a line it holds.
    pub(crate) fn cap(&self) -> usize {
        self.cap
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

#[cfg(test)]
mod tests {
    use std::io::BufReader;

    use super::*;

    fn lines(text: &'static [u8], cap: usize) -> Vec<(u64, RawLine)> {
        // A tiny buffer, so lines cross buffer boundaries.
        let inner = Box::new(BufReader::with_capacity(3, text));
        let mut reader = LineReader::new(inner, cap);
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
}
