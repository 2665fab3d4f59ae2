//! [`ProtocolError`]: everything that can be wrong with a V2 request body, worded for the
//! client that sent it, plus the helpers that render offending JSON values into messages.
//!
//! Every variant is a client error (the edges answer it as one: HTTP 400). Messages name the
//! input (`input 'x'`) when its name is known, else its position (`inputs[2]`).

use serde_json::value::RawValue;

use crate::model::tensor::{DataType, TensorError};
pub use crate::model::text::clip;
use crate::model::text::QUOTE_LIMIT;

/// Why a V2 request body was rejected.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The JSON text itself is broken (syntax, truncation, nesting deeper than 128).
    #[error("invalid JSON at line {line} column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    /// `Inference-Header-Content-Length` points past the end of the body.
    #[error("Inference-Header-Content-Length is {header_len} but the body has only {body_len} bytes")]
    HeaderLengthExceedsBody { header_len: usize, body_len: usize },
    /// A field or parameter holds the wrong kind of JSON value; `what` names it, e.g.
    /// `"shape"` or `parameters.binary_data_size`, and `found` renders the value.
    #[error("{at}: {what} must be {expected}, got {found}")]
    WrongType {
        at: String,
        what: String,
        expected: &'static str,
        found: String,
    },
    /// A required field is absent.
    #[error("{at}: missing {field}")]
    MissingField { at: String, field: &'static str },
    /// The same key appears twice in one JSON object.
    #[error("{at}: field \"{field}\" appears more than once")]
    DuplicateField { at: String, field: &'static str },
    /// Two inputs share a name.
    #[error("input '{0}' appears more than once")]
    DuplicateInput(String),
    /// The same output is requested twice.
    #[error("output '{0}' is requested more than once")]
    DuplicateOutput(String),
    /// `found` is the datatype as sent, rendered as JSON (so strings keep their quotes).
    #[error("input '{name}': datatype {found} is not a V2 datatype")]
    UnknownDatatype { name: String, found: String },
    #[error("input '{name}': shape {shape} has negative dimension {dim}")]
    NegativeDimension { name: String, shape: String, dim: i64 },
    #[error("input '{name}': shape {shape:?} has too many elements")]
    ShapeOverflow { name: String, shape: Vec<u64> },
    /// The data holds a different number of elements than the shape declares.
    #[error("input '{name}': shape {shape:?} needs {expected} {datatype} values, got {actual}")]
    ElementCount {
        name: String,
        shape: Vec<u64>,
        datatype: DataType,
        expected: u64,
        actual: u64,
    },
    /// A `data` element has the wrong JSON type for the datatype; `index` counts elements
    /// in row-major order from 0, whatever the nesting.
    #[error("input '{name}': data element {index} is {found}, expected {expected}")]
    ElementType {
        name: String,
        index: u64,
        found: String,
        expected: &'static str,
    },
    /// A number that cannot be represented in the datatype.
    #[error("input '{name}': value {value} does not fit {datatype}")]
    OutOfRange {
        name: String,
        value: String,
        datatype: DataType,
    },
    #[error("input '{name}': BYTES element {index} is {len} bytes, more than a BYTES element can hold")]
    BytesElementTooLong { name: String, index: u64, len: u64 },
    #[error("input '{name}': has both \"data\" and parameters.binary_data_size")]
    DataAndBinary { name: String },
    #[error("input '{name}': parameters.binary_data_size needs the Inference-Header-Content-Length header")]
    BinaryWithoutHeader { name: String },
    /// A fixed-size input's `binary_data_size` disagrees with its shape.
    #[error("input '{name}': shape {shape:?} needs {expected} bytes of {datatype} binary data, binary_data_size is {actual}")]
    BinarySize {
        name: String,
        shape: Vec<u64>,
        datatype: DataType,
        expected: u64,
        actual: u64,
    },
    /// The body after the JSON header is not exactly the declared binary inputs.
    #[error(
        "binary data after the JSON header is {actual} bytes but the inputs' binary_data_size add up to {declared}"
    )]
    BinaryTotal { declared: u128, actual: usize },
    #[error("input '{name}': binary BYTES data is malformed: {reason}")]
    MalformedBytes { name: String, reason: String },
    /// A parameter of an extension this server does not implement (shared memory,
    /// classification).
    #[error("{at}: parameter \"{parameter}\" is not supported")]
    Unsupported { at: String, parameter: String },
    /// The body is not UTF-8, which JSON must be.
    #[error("the request body is not valid UTF-8 (first bad byte at offset {offset})")]
    InvalidUtf8 { offset: usize },
    /// More entries than [`super::limits`] allows; `what` names them (`inputs`, ...).
    #[error("{at}: more than {limit} {what}")]
    TooMany {
        at: String,
        what: &'static str,
        limit: usize,
    },
    /// A string longer than [`super::limits`] allows.
    #[error("{at}: {what} is {len} bytes, more than the limit of {limit}")]
    TooLong {
        at: String,
        what: &'static str,
        len: usize,
        limit: usize,
    },
    /// The same parameter twice in one `parameters` object.
    #[error("{at}: parameter {name} appears more than once")]
    DuplicateParameter { at: String, name: String },
    /// A tensor failed [`crate::model::tensor::Tensor::validate`] (not expected after the checks
    /// above; kept so no inconsistent tensor can slip through).
    #[error("input {0}")]
    Tensor(#[from] TensorError),
}

impl ProtocolError {
    /// Wraps a `serde_json` error raised while reading the JSON header.
    pub(crate) fn json(error: &serde_json::Error) -> ProtocolError {
        let full = error.to_string();
        let suffix = format!(" at line {} column {}", error.line(), error.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
        ProtocolError::Json {
            line: error.line(),
            column: error.column(),
            message,
        }
    }
}

/// Renders a string as a JSON string literal, shortened to [`QUOTE_LIMIT`] characters.
pub(crate) fn render_str(s: &str) -> String {
    let (head, cut) = match s.char_indices().nth(QUOTE_LIMIT) {
        Some((at, _)) => (&s[..at], true),
        None => (s, false),
    };
    let mut out = serde_json::to_string(head).unwrap_or_else(|_| String::from("a string"));
    if cut {
        out.insert_str(out.len() - 1, "...");
    }
    out
}

/// Renders a client's raw JSON value for a message: a short string as its literal, any
/// other value as written, both cut to [`QUOTE_LIMIT`] characters.
pub(crate) fn render_raw(raw: &RawValue) -> String {
    let text = raw.get();
    if text.starts_with('"') && text.len() <= 8 * QUOTE_LIMIT {
        if let Ok(s) = serde_json::from_str::<String>(text) {
            return render_str(&s);
        }
    }
    clip(text).into_owned()
}

/// Renders a float the way JSON would print it (`1e39`, `0.5`).
pub(crate) fn render_f64(v: f64) -> String {
    serde_json::to_string(&v).unwrap_or_else(|_| v.to_string())
}
