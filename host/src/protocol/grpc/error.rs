//! [`MessageError`]: what is wrong with a gRPC message beyond what [`ProtocolError`]
//! says of any request: how the message lays its tensors out.

use crate::model::tensor::DataType;
use crate::protocol::ProtocolError;

/// Why a message could not be read or written.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// What any wire format's request (or answer) could get wrong.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("raw_input_contents has {raw} entries for {inputs} inputs: give one per input, in input order (or none)")]
    RawInputs { raw: usize, inputs: usize },
    #[error("raw_output_contents has {raw} entries for {outputs} outputs")]
    RawOutputs { raw: usize, outputs: usize },
    /// An input with typed `contents` and an entry in `raw_input_contents`; `name` clipped.
    #[error("input '{name}': has both contents and raw_input_contents")]
    ContentsAndRaw { name: String },
    /// A tensor to send in typed contents whose datatype has no typed field (FP16).
    #[error("input '{name}': {datatype} has no typed contents field: send it as raw_input_contents")]
    NoTypedField { name: String, datatype: DataType },
}
