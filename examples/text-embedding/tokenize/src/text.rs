//! Text to token ids with a Hugging Face `tokenizer.json`, free of the plugin SDK (so the
//! same code can be checked natively against Python's `tokenizers`).
//!
//! Truncation is the library's own, set up the way sentence-transformers sets it for
//! `max_seq_length`: `max_length = max_tokens` counting the special tokens, longest
//! first, from the right, stride 0 — what Python's `tokenizer.enable_truncation(256)`
//! does. Padding in the file is switched off: the host pads a batch to its longest item.
//!
//! The library tokenizes a whole text before it truncates: time and memory grow with the
//! text (about 45 bytes of memory per byte of text), though only the first `max_tokens`
//! tokens are kept. For BERT's tokenizers (`BertNormalizer` or none, `BertPreTokenizer`)
//! the text can be cut where no token spans the cut — before an ASCII space, tab or line
//! break, and before a CJK ideograph when the normalizer spaces them out — without
//! changing the tokens before the cut. So a long text is tokenized in pieces: to truncate,
//! a prefix that holds `max_tokens` tokens (grown until it does); to count the tokens of a
//! text that may not be truncated, chunk by chunk, stopping once the count is well past
//! `max_tokens`. Other tokenizers take the whole text, as the library does.

use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{PostProcessor, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// Tokens per text at most, special tokens included, when `max_tokens` is not given:
/// all-MiniLM-L6-v2's `max_seq_length`.
pub(crate) const DEFAULT_MAX_TOKENS: usize = 256;

/// How a long text is cut into pieces (when the tokenizer allows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pieces {
    /// The first prefix tried for truncation, in bytes per token kept (English is ~5 bytes
    /// per token, CJK 3); a prefix short of tokens grows fourfold.
    pub(crate) prefix_bytes_per_token: usize,
    /// The chunk size when counting tokens.
    pub(crate) chunk_bytes: usize,
    /// Counting stops once past this many times `max_tokens` (the refusal then says "at
    /// least").
    pub(crate) count_limit_factor: usize,
}

impl Default for Pieces {
    fn default() -> Self {
        Pieces {
            prefix_bytes_per_token: 8,
            chunk_bytes: 16 * 1024,
            count_limit_factor: 64,
        }
    }
}

/// A tokenizer that answers at most `max_tokens` ids per text.
#[derive(Debug)]
pub(crate) struct TextEncoder {
    tokenizer: Tokenizer,
    truncation: TruncationParams,
    /// Whether the tokenizer's truncation is set now (it is off to count tokens).
    truncating: bool,
    /// The special tokens added to every text (`[CLS]`, `[SEP]`).
    special: usize,
    /// Where a text may be cut, if this tokenizer has such places.
    cuts: Option<Cuts>,
    pieces: Pieces,
}

/// Why a text got no ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EncodeError {
    /// Without truncation the text is `tokens` long (`at_least` that many, when counting
    /// stopped early), more than `max_tokens`.
    TooLong {
        tokens: usize,
        at_least: bool,
        max_tokens: usize,
    },
    /// The tokenizer failed, with its message.
    Tokenizer(String),
}

impl TextEncoder {
    /// A tokenizer with its truncation set to `max_tokens` and its padding off.
    ///
    /// # Errors
    /// Why `max_tokens` cannot work with this tokenizer.
    pub(crate) fn new(mut tokenizer: Tokenizer, max_tokens: usize) -> Result<Self, String> {
        // [CLS] and [SEP] for BERT: they count against max_tokens, and at least one token
        // of text must fit (the library would otherwise underflow its length).
        let special = tokenizer.get_post_processor().map_or(0, |p| p.added_tokens(false));
        if max_tokens <= special {
            return Err(format!(
                "parameter 'max_tokens': {max_tokens} leaves no room for text: the tokenizer adds \
                 {special} special tokens to every text, so it must be at least {}",
                special + 1
            ));
        }
        let truncation = TruncationParams {
            max_length: max_tokens,
            strategy: TruncationStrategy::LongestFirst,
            direction: TruncationDirection::Right,
            stride: 0,
        };
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(truncation.clone()))
            .map_err(|e| format!("parameter 'max_tokens': {e}"))?;
        let cuts = Cuts::of(&tokenizer);
        Ok(TextEncoder {
            tokenizer,
            truncation,
            truncating: true,
            special,
            cuts,
            pieces: Pieces::default(),
        })
    }

    /// Tokens per text at most, special tokens included.
    pub(crate) fn max_tokens(&self) -> usize {
        self.truncation.max_length
    }

    /// Whether long texts are tokenized in pieces (see the module docs).
    pub(crate) fn cuts_texts(&self) -> bool {
        self.cuts.is_some()
    }

    /// Other piece sizes (tests).
    #[cfg(test)]
    pub(crate) fn set_pieces(&mut self, pieces: Pieces) {
        self.pieces = pieces;
    }

    /// The ids of `text` with the special tokens (`[CLS] ... [SEP]`): cut to `max_tokens`
    /// when `truncate`, else refused when longer.
    ///
    /// # Errors
    /// [`EncodeError::TooLong`] when `!truncate` and the text has more than `max_tokens`
    /// tokens; [`EncodeError::Tokenizer`] when the tokenizer fails.
    pub(crate) fn encode(&mut self, text: &str, truncate: bool) -> Result<Vec<u32>, EncodeError> {
        if truncate {
            self.encode_truncated(text)
        } else {
            self.encode_whole(text)
        }
    }

    /// The ids of the text's first `max_tokens` tokens: those of a prefix that has as many.
    fn encode_truncated(&mut self, text: &str) -> Result<Vec<u32>, EncodeError> {
        self.set_truncation(true)?;
        let max_tokens = self.max_tokens();
        let mut budget = max_tokens.saturating_mul(self.pieces.prefix_bytes_per_token);
        loop {
            let end = match self.cuts {
                Some(cuts) if budget < text.len() => cuts.near(text, budget),
                _ => text.len(),
            };
            let prefix = text.get(..end).unwrap_or(text);
            // `encode_fast`: the same ids as `encode`, without computing offsets.
            let encoding = self.tokenizer.encode_fast(prefix, true).map_err(tokenizer_error)?;
            // A full encoding: the prefix has at least max_tokens tokens, and those are the
            // text's first ones.
            if prefix.len() == text.len() || encoding.len() >= max_tokens {
                return Ok(encoding.get_ids().to_vec());
            }
            budget = budget.max(end).saturating_mul(4);
        }
    }

    /// The ids of the whole text, which must have at most `max_tokens` tokens.
    fn encode_whole(&mut self, text: &str) -> Result<Vec<u32>, EncodeError> {
        self.set_truncation(false)?;
        let max_tokens = self.max_tokens();
        if let Some(cuts) = self.cuts {
            if text.len() > self.pieces.chunk_bytes {
                self.count_chunked(&cuts, text)?;
            }
        }
        let encoding = self.tokenizer.encode_fast(text, true).map_err(tokenizer_error)?;
        if encoding.len() > max_tokens {
            return Err(EncodeError::TooLong {
                tokens: encoding.len(),
                at_least: false,
                max_tokens,
            });
        }
        Ok(encoding.get_ids().to_vec())
    }

    /// Refuses a text of more than `max_tokens` tokens, counted chunk by chunk (memory for
    /// one chunk at a time) up to `count_limit_factor` times `max_tokens`.
    fn count_chunked(&self, cuts: &Cuts, text: &str) -> Result<(), EncodeError> {
        let max_tokens = self.max_tokens();
        let limit = max_tokens.saturating_mul(self.pieces.count_limit_factor);
        let mut tokens = self.special;
        let mut rest = text;
        while !rest.is_empty() {
            let end = if rest.len() > self.pieces.chunk_bytes {
                cuts.near(rest, self.pieces.chunk_bytes)
            } else {
                rest.len()
            };
            let (chunk, tail) = rest.split_at_checked(end).unwrap_or((rest, ""));
            tokens += self.tokenizer.encode_fast(chunk, false).map_err(tokenizer_error)?.len();
            rest = tail;
            if tokens > limit && !rest.is_empty() {
                break;
            }
        }
        if tokens > max_tokens {
            return Err(EncodeError::TooLong {
                tokens,
                at_least: !rest.is_empty(),
                max_tokens,
            });
        }
        Ok(())
    }

    fn set_truncation(&mut self, on: bool) -> Result<(), EncodeError> {
        if on != self.truncating {
            // Cannot fail: `new` set the same parameters once already.
            self.tokenizer
                .with_truncation(on.then(|| self.truncation.clone()))
                .map_err(tokenizer_error)?;
            self.truncating = on;
        }
        Ok(())
    }
}

fn tokenizer_error(e: tokenizers::Error) -> EncodeError {
    EncodeError::Tokenizer(e.to_string())
}

/// The places where a text may be cut without changing the tokens on either side: before
/// an ASCII space, tab, line break or punctuation mark (the pre-tokenizer splits there;
/// the normalizer keeps them), and before a CJK ideograph when the normalizer puts spaces
/// around those. Not before a character of an added token (`[CLS]`'s brackets), which
/// could be cut in two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cuts {
    /// Which ASCII characters a text may be cut before.
    ascii: [bool; 128],
    chinese: bool,
}

impl Cuts {
    /// The cuts of a BERT tokenizer, none for others.
    fn of(tokenizer: &Tokenizer) -> Option<Cuts> {
        let chinese = match tokenizer.get_normalizer() {
            None => false,
            Some(NormalizerWrapper::BertNormalizer(n)) => n.handle_chinese_chars,
            Some(_) => return None,
        };
        if !matches!(
            tokenizer.get_pre_tokenizer(),
            Some(PreTokenizerWrapper::BertPreTokenizer(_))
        ) {
            return None;
        }
        let mut cuts = Cuts::new(chinese);
        for token in tokenizer.get_added_tokens_decoder().values() {
            for c in token.content.chars() {
                cuts.exclude(c);
            }
        }
        Some(cuts)
    }

    /// Cuts before ASCII whitespace and punctuation (and CJK ideographs if `chinese`).
    fn new(chinese: bool) -> Cuts {
        let mut ascii = [false; 128];
        for (byte, cut) in (0u8..).zip(ascii.iter_mut()) {
            *cut = matches!(byte, b' ' | b'\t' | b'\n' | b'\r') || byte.is_ascii_punctuation();
        }
        Cuts { ascii, chinese }
    }

    /// No cut before `c`.
    fn exclude(&mut self, c: char) {
        if let Some(cut) = self.ascii.get_mut(c as usize) {
            *cut = false;
        } else if is_chinese_char(c) {
            self.chinese = false;
        }
    }

    /// Whether a text may be cut right before `c`.
    fn before(&self, c: char) -> bool {
        match self.ascii.get(c as usize) {
            Some(&cut) => cut,
            None => self.chinese && is_chinese_char(c),
        }
    }

    /// A cut of `text` near byte `at`: the last one at or before it (but not at 0), else
    /// the first after it, else the end of the text.
    fn near(&self, text: &str, at: usize) -> usize {
        let mut at = at.min(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let Some((head, tail)) = text.split_at_checked(at) else {
            return text.len();
        };
        if let Some((i, _)) = head.char_indices().rev().find(|&(i, c)| i > 0 && self.before(c)) {
            return i;
        }
        match tail.char_indices().find(|&(i, c)| at + i > 0 && self.before(c)) {
            Some((i, _)) => at + i,
            None => text.len(),
        }
    }
}

/// The CJK ideographs that `BertNormalizer` spaces out (its `is_chinese_char`).
fn is_chinese_char(c: char) -> bool {
    matches!(
        u32::from(c),
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// Parses a `tokenizer.json`.
///
/// # Errors
/// The parser's message.
pub(crate) fn parse(json: &[u8]) -> Result<Tokenizer, String> {
    Tokenizer::from_bytes(json).map_err(|e| format!("not a tokenizer.json: {e}"))
}

/// `bytes` as text.
///
/// # Errors
/// `text is not valid UTF-8 (invalid byte at offset 3)`.
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes)
        .map_err(|e| format!("text is not valid UTF-8 (invalid byte at offset {})", e.valid_up_to()))
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::TooLong {
                tokens,
                at_least,
                max_tokens,
            } => write!(
                f,
                "text is {}{tokens} tokens long, more than this model's max_tokens ({max_tokens}); \
                 send it with truncate: true or shorten it",
                if *at_least { "at least " } else { "" }
            ),
            EncodeError::Tokenizer(message) => write!(f, "tokenizer: {message}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A BERT-style tokenizer.json with a tiny vocabulary, and the file's own truncation
    /// and padding (128), which `new` must override.
    const TOKENIZER: &str = r###"{
      "version": "1.0",
      "truncation": {"max_length": 128, "strategy": "LongestFirst", "stride": 0},
      "padding": {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": null,
                  "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
      "added_tokens": [
        {"id": 0, "special": true, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 1, "special": true, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 2, "special": true, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 3, "special": true, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 13, "special": true, "content": "[MASK]", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false}
      ],
      "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                     "strip_accents": null, "lowercase": true},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                           "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
      "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 12,
                "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5,
                          "!": 6, "play": 7, "##ing": 8, "e": 9, "東": 10, "京": 11, ",": 12,
                          "[MASK]": 13, "##e": 14, "a": 15, "##a": 16}}
    }"###;

    /// The same with one more added token, holding a space and a comma.
    fn tokenizer_with_phrase() -> String {
        TOKENIZER.replace(
            r#""added_tokens": ["#,
            r#""added_tokens": [{"id": 17, "special": false, "content": "hello, world", "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false},"#,
        )
    }

    fn encoder(max_tokens: usize) -> TextEncoder {
        TextEncoder::new(parse(TOKENIZER.as_bytes()).unwrap(), max_tokens).unwrap()
    }

    /// The library on the whole text, as Python's `tokenizers` runs it: the ids with
    /// truncation to `max_tokens`, or without truncation.
    fn library(json: &str, max_tokens: usize, text: &str, truncate: bool) -> Vec<u32> {
        let mut t = Tokenizer::from_bytes(json).unwrap();
        t.with_padding(None);
        let truncation = truncate.then(|| TruncationParams {
            max_length: max_tokens,
            ..TruncationParams::default()
        });
        t.with_truncation(truncation).unwrap();
        t.encode(text, true).unwrap().get_ids().to_vec()
    }

    #[test]
    fn adds_special_tokens_and_no_padding() {
        let mut e = encoder(DEFAULT_MAX_TOKENS);
        assert!(e.cuts_texts());
        assert_eq!(e.encode("Hello, World!", true).unwrap(), [2, 4, 12, 5, 6, 3]);
        assert_eq!(e.encode("playing", true).unwrap(), [2, 7, 8, 3]);
        assert_eq!(e.encode("", true).unwrap(), [2, 3]);
        assert_eq!(e.encode("東京", false).unwrap(), [2, 10, 11, 3]);
    }

    #[test]
    fn truncates_counting_special_tokens_or_refuses() {
        let mut e = encoder(4);
        let text = "hello world hello world";
        assert_eq!(e.encode(text, true).unwrap(), [2, 4, 5, 3]);
        assert_eq!(
            e.encode(text, false),
            Err(EncodeError::TooLong {
                tokens: 6,
                at_least: false,
                max_tokens: 4
            })
        );
        assert_eq!(e.encode("hello world", false).unwrap(), [2, 4, 5, 3]);
        // Switching back restores truncation.
        assert_eq!(e.encode(text, true).unwrap(), [2, 4, 5, 3]);
        assert_eq!(
            e.encode(text, false).unwrap_err().to_string(),
            "text is 6 tokens long, more than this model's max_tokens (4); \
             send it with truncate: true or shorten it"
        );
    }

    #[test]
    fn long_texts_are_counted_in_chunks_up_to_a_limit() {
        let mut e = encoder(4);
        e.set_pieces(Pieces {
            prefix_bytes_per_token: 1,
            chunk_bytes: 8,
            count_limit_factor: 3,
        });
        let text = "hello world hello world";
        assert_eq!(
            e.encode(text, false),
            Err(EncodeError::TooLong {
                tokens: 6,
                at_least: false,
                max_tokens: 4
            })
        );
        let long = "hello ".repeat(100);
        let err = e.encode(&long, false).unwrap_err();
        assert!(
            matches!(err, EncodeError::TooLong { tokens, at_least: true, .. } if tokens > 12 && tokens < 102),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("text is at least "), "{err}");
        assert_eq!(e.encode(&long, true).unwrap(), [2, 4, 4, 3]);
    }

    /// Texts tokenized in pieces get the library's ids for the whole text.
    #[test]
    fn pieces_match_the_whole_text() {
        const PARTS: &[&str] = &[
            "hello",
            "world",
            "Play",
            "ing",
            "e",
            "a",
            "!",
            ",",
            ".",
            "-",
            "'",
            "[",
            "]",
            "#",
            " ",
            "  ",
            "\t",
            "\n",
            "\r\n",
            "\u{85}",
            "\u{b}",
            "\u{c}",
            "\u{a0}",
            "\u{3000}",
            "\u{2028}",
            "東",
            "京",
            "\u{f900}",
            "\u{301}",
            "é",
            "\u{200b}",
            "\u{200d}",
            "😀",
            "[CLS]",
            "[MASK]",
            "hello, world",
            "hello,",
            "HELLO",
            "\0",
            "\u{fffd}",
            "aaaaaaaaaaaaaaa",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let with_phrase = tokenizer_with_phrase();
        for round in 0..2000 {
            let max_tokens = [3, 4, 7, 20][round % 4];
            let json = if round % 5 == 0 {
                with_phrase.as_str()
            } else {
                TOKENIZER
            };
            let mut e = TextEncoder::new(parse(json.as_bytes()).unwrap(), max_tokens).unwrap();
            e.set_pieces(Pieces {
                prefix_bytes_per_token: 1 + round % 3,
                chunk_bytes: 1 + next(24),
                count_limit_factor: 1 + next(4),
            });
            let text: String = (0..next(80)).map(|_| PARTS[next(PARTS.len())]).collect();
            assert_eq!(
                e.encode(&text, true).unwrap(),
                library(json, max_tokens, &text, true),
                "{text:?}, max_tokens {max_tokens}"
            );
            let whole = library(json, max_tokens, &text, false);
            match e.encode(&text, false) {
                Ok(ids) => assert_eq!(ids, whole, "{text:?}"),
                Err(EncodeError::TooLong { tokens, at_least, .. }) => {
                    assert!(whole.len() > max_tokens, "{text:?}");
                    if at_least {
                        assert!(tokens > max_tokens && tokens <= whole.len(), "{text:?}");
                    } else {
                        assert_eq!(tokens, whole.len(), "{text:?}");
                    }
                }
                Err(other) => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn cuts_fall_before_spaces_punctuation_and_ideographs() {
        let cuts = Cuts::new(true);
        assert_eq!(cuts.near("hello world", 8), 5);
        assert_eq!(cuts.near("helloworld again", 3), 10);
        assert_eq!(cuts.near("hello東京", 7), 5);
        assert_eq!(cuts.near(" abc", 2), 4);
        assert_eq!(Cuts::new(false).near("ab東京", 4), 8);
        assert_eq!(cuts.near("é é", 1), 2);
        assert_eq!(cuts.near("abc,def[x]", 9), 7);
        let mut bert = Cuts::new(true);
        bert.exclude('[');
        assert_eq!(bert.near("abc,def[x]", 9), 3);
        assert!(!bert.before('\u{b}') && !bert.before('\u{85}') && !bert.before('\u{a0}'));
    }

    #[test]
    fn bad_settings_and_files_are_init_errors() {
        let err = TextEncoder::new(parse(TOKENIZER.as_bytes()).unwrap(), 2).unwrap_err();
        assert!(err.contains("must be at least 3"), "{err}");
        assert!(parse(b"{}").unwrap_err().starts_with("not a tokenizer.json"));
    }

    #[test]
    fn utf8_errors_name_the_offset() {
        assert_eq!(utf8(b"abc").unwrap(), "abc");
        assert_eq!(
            utf8(b"abc\xffd").unwrap_err(),
            "text is not valid UTF-8 (invalid byte at offset 3)"
        );
    }
}
