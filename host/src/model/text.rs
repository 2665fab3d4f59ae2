//! Quoting text that came from outside (a client, a plugin) in messages and log lines.

use std::borrow::Cow;

/// Characters of an outside value that a message or a log line quotes; longer values
/// are cut and marked with `...`.
pub const QUOTE_LIMIT: usize = 48;

/// Cuts `text` to [`QUOTE_LIMIT`] characters, marking the cut with `...`.
pub fn clip(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((at, _)) => Cow::Owned(format!("{}...", &text[..at])),
        None => Cow::Borrowed(text),
    }
}
