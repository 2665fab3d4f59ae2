//! Quoting text that came from outside (a client, a plugin) in messages and log lines.

use std::borrow::Cow;

/// Characters of an outside value that a message or a log line quotes; longer values
/// are cut and marked with `...`.
pub const QUOTE_LIMIT: usize = 48;

/// `text` cut to at most `max` bytes, on a character boundary (no mark).
pub fn cut_to_bytes(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Cuts `text` to [`QUOTE_LIMIT`] characters, marking the cut with `...`.
pub fn clip(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((at, _)) => Cow::Owned(format!("{}...", &text[..at])),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::cut_to_bytes;

    #[test]
    fn text_is_cut_on_character_boundaries() {
        assert_eq!(cut_to_bytes("héllo", 2), "h");
        assert_eq!(cut_to_bytes("héllo", 3), "hé");
        assert_eq!(cut_to_bytes("short", 100), "short");
    }
}
