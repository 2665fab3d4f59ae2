//! What the OpenMetrics text format can carry in a label value, and how it is written.
//!
//! The format quotes label values and escapes exactly three characters in them: `\` as
//! `\\`, `"` as `\"` and a newline as `\n`. prometheus-client (0.24) writes label values
//! as they are, so every label value the server puts on `/metrics` — a plugin's, and the
//! host's own (model names, versions, routes, status names) — goes through [`Escaped`]:
//! a value can then never close its quotes, end its line or write a line of its own.
//!
//! The format's grammar allows any other Unicode character raw, control characters
//! included, but line-based readers split lines on some of them (a carriage return,
//! U+0085, U+2028, U+2029) or drop them, so the host refuses values that hold them
//! ([`check_label_value`]) instead of writing what a scraper would misread.

use std::fmt::{self, Write};

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder};

/// A label value written escaped as the OpenMetrics text format requires.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Escaped<T>(pub T);

impl<T: AsRef<str>> EncodeLabelValue for Escaped<T> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        write_escaped(self.0.as_ref(), encoder)
    }
}

/// Name-value pairs whose values are written escaped (a plugin's labels).
#[derive(Clone, Copy, Debug)]
pub struct EscapedLabels<'a>(pub &'a [(String, String)]);

impl EncodeLabelSet for EscapedLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        for (name, value) in self.0 {
            (name.as_str(), Escaped(value.as_str())).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// Writes `value` with `\`, `"` and newlines escaped.
pub fn write_escaped(value: &str, out: &mut impl Write) -> fmt::Result {
    let mut rest = value;
    while let Some(at) = rest.find(['\\', '"', '\n']) {
        out.write_str(&rest[..at])?;
        out.write_str(match rest.as_bytes()[at] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        })?;
        rest = &rest[at + 1..];
    }
    out.write_str(rest)
}

/// A writer that escapes what is written through it (for label values written in pieces).
pub struct EscapingWriter<'a, W: Write>(pub &'a mut W);

impl<W: Write> Write for EscapingWriter<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_escaped(s, self.0)
    }
}

/// The length of `value` once escaped.
pub fn escaped_len(value: &str) -> usize {
    value.len() + value.bytes().filter(|b| matches!(b, b'\\' | b'"' | b'\n')).count()
}

/// Whether a reader of the text format would misread `c` in a label value: control
/// characters (but the newline, which is escaped) and Unicode's line separators.
fn misread(c: char) -> bool {
    (c.is_control() && c != '\n') || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Refuses a label value that OpenMetrics text would not carry faithfully, saying why.
pub fn check_label_value(value: &str) -> Result<(), String> {
    match value.chars().find(|&c| misread(c)) {
        None => Ok(()),
        Some(c) => Err(format!(
            "holds the character U+{:04X}: OpenMetrics text carries no control characters or line \
             separators in a label value but the newline (escaped as \\n)",
            u32::from(c)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(value: &str) -> String {
        let mut out = String::new();
        write_escaped(value, &mut out).unwrap();
        assert_eq!(out.len(), escaped_len(value), "{value:?}");
        out
    }

    #[test]
    fn the_three_characters_are_escaped_and_nothing_else() {
        assert_eq!(escaped("plain"), "plain");
        assert_eq!(escaped(r#"a"b"#), r#"a\"b"#);
        assert_eq!(escaped(r"a\b"), r"a\\b");
        assert_eq!(escaped("a\nb"), r"a\nb");
        assert_eq!(
            escaped("} 0\ntensorplug_model_ready{model=\"other\"} 0\n# EOF"),
            r#"} 0\ntensorplug_model_ready{model=\"other\"} 0\n# EOF"#
        );
        assert_eq!(escaped(r#"\""#), r#"\\\""#);
        assert_eq!(escaped("é ✓ {}"), "é ✓ {}");
        assert_eq!(escaped(""), "");
    }

    #[test]
    fn escaping_through_the_writer_is_the_same_in_pieces() {
        let mut out = String::new();
        let mut writer = EscapingWriter(&mut out);
        writer.write_str("a\"").unwrap();
        writer.write_str("\n\\").unwrap();
        assert_eq!(out, r#"a\"\n\\"#);
    }

    #[test]
    fn control_characters_and_line_separators_are_refused_but_newline() {
        assert!(check_label_value("a\nb \"q\" \\ é").is_ok());
        for bad in [
            "\r",
            "\0",
            "a\tb",
            "\u{7f}",
            "\u{85}",
            "\u{2028}",
            "\u{2029}",
            "\u{1b}[31m",
        ] {
            let error = check_label_value(bad).unwrap_err();
            assert!(
                error.contains("U+") && error.contains("OpenMetrics"),
                "{bad:?}: {error}"
            );
        }
        assert!(check_label_value("\r").unwrap_err().contains("U+000D"));
    }
}
