//! Caps on what one request may contain, besides its body size.
//!
//! A request body is bounded by `--max-body-bytes`, but within that bound a body can
//! still ask for a lot: thousands of inputs, megabyte-long names quoted back in errors
//! and logs, deep nesting. These caps keep the cost of decoding (and of every message
//! about a request) proportional to the request's real content. Each is far above what a
//! real client sends; a request beyond one is refused with a 400 that names the cap.

/// Inputs in one request.
pub const MAX_INPUTS: usize = 1024;
/// Outputs one request may list in `outputs`.
pub const MAX_OUTPUTS: usize = 1024;
/// Entries of one `parameters` object (the request's, an input's or an output's).
pub const MAX_PARAMETERS: usize = 64;
/// Bytes of an input, output or parameter name, or a datatype.
pub const MAX_NAME_BYTES: usize = 256;
/// Bytes of the request `id` (it is echoed in the answer and attached to log lines).
pub const MAX_ID_BYTES: usize = 256;
/// Bytes of a string parameter value.
pub const MAX_PARAMETER_STRING_BYTES: usize = 4096;
/// Dimensions of an input's shape.
pub const MAX_DIMS: usize = 32;
/// Characters of a client's value that an error message or a log line quotes.
pub use crate::model::text::QUOTE_LIMIT;
