//! What a `ModelInferRequest` may cost to decode, checked on its wire bytes before prost
//! builds anything.
//!
//! prost decodes a whole message before the protocol's caps can look at it, and a
//! protobuf message can ask for far more memory than it weighs: a two-byte entry of a
//! repeated message field becomes a struct of a hundred bytes or more, a one-byte varint
//! of a packed `int64` field eight bytes. So the request's wire format is walked first
//! (no allocation) and refused when it holds more entries than the caps of
//! [`crate::protocol::limits`] allow, or when its tensor contents would decode to more
//! than [`MAX_CONTENT_AMPLIFICATION`] times the message's size — the same class of bound
//! as the REST edge's (4 bytes of tensor per byte of JSON).

use crate::protocol::limits::{MAX_DIMS, MAX_INPUTS, MAX_OUTPUTS, MAX_PARAMETERS};

/// Decoded tensor bytes allowed per byte of message (plus [`CONTENT_SLACK`]). Two, not
/// REST's four: a decoded gRPC request holds its typed values and then, while they become
/// the tensor's bytes, both at once, so this keeps the peak within REST's bound (6 × the
/// body + 32 MiB). Clients with large tensors send `raw_input_contents` (one byte per
/// byte) or packed floats (the same).
pub const MAX_CONTENT_AMPLIFICATION: usize = 2;

/// Decoded tensor bytes always allowed, whatever the message's size.
const CONTENT_SLACK: usize = 1 << 20;

/// What one `bytes_contents` entry costs decoded besides its bytes (a `Vec`'s header).
const BYTES_ENTRY_COST: usize = 24;

/// Why a message was refused before decoding.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("the message is not valid protobuf")]
    Malformed,
    #[error("{what}: more than {limit} entries")]
    TooMany { what: &'static str, limit: usize },
    #[error("the tensor contents would decode to {decoded} bytes, more than {limit} for a {size}-byte message")]
    TooLarge { decoded: usize, limit: usize, size: usize },
}

/// One field of a message on the wire.
enum Value<'a> {
    Varint,
    Fixed,
    Bytes(&'a [u8]),
}

/// The fields of a message, in order: (field number, value).
struct Fields<'a> {
    rest: &'a [u8],
}

fn varint(bytes: &mut &[u8]) -> Result<u64, BudgetError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or(BudgetError::Malformed)?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(BudgetError::Malformed)
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), BudgetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        Some(self.field())
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u64, Value<'a>), BudgetError> {
        let key = varint(&mut self.rest)?;
        let value = match key & 7 {
            0 => {
                varint(&mut self.rest)?;
                Value::Varint
            }
            1 | 5 => {
                let size = if key & 7 == 1 { 8 } else { 4 };
                self.rest = self.rest.get(size..).ok_or(BudgetError::Malformed)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut self.rest)?).map_err(|_| BudgetError::Malformed)?;
                let (value, rest) = self.rest.split_at_checked(len).ok_or(BudgetError::Malformed)?;
                self.rest = rest;
                Value::Bytes(value)
            }
            _ => return Err(BudgetError::Malformed),
        };
        Ok((key >> 3, value))
    }
}

impl<'a> Fields<'a> {
    /// The next field and its bytes on the wire (key included).
    fn field_raw(&mut self) -> Result<(u64, Value<'a>, &'a [u8]), BudgetError> {
        let start = self.rest;
        let (number, value) = self.field()?;
        Ok((number, value, &start[..start.len() - self.rest.len()]))
    }
}

fn fields(bytes: &[u8]) -> Fields<'_> {
    Fields { rest: bytes }
}

/// Counts entries of one repeated field against its cap.
struct Counter {
    what: &'static str,
    limit: usize,
    seen: usize,
}

impl Counter {
    fn new(what: &'static str, limit: usize) -> Self {
        Self { what, limit, seen: 0 }
    }

    fn add(&mut self, n: usize) -> Result<(), BudgetError> {
        self.seen = self.seen.saturating_add(n);
        if self.seen > self.limit {
            return Err(BudgetError::TooMany {
                what: self.what,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

/// Varints in a packed field's bytes (each ends with a byte below 0x80).
fn packed_varints(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b < 0x80).count()
}

/// Checks a `ModelInferRequest`'s wire bytes against the caps and the content budget.
pub fn check_infer_request(message: &[u8]) -> Result<(), BudgetError> {
    let mut parameters = Counter::new("request parameters", MAX_PARAMETERS);
    let mut inputs = Counter::new("inputs", MAX_INPUTS);
    let mut outputs = Counter::new("requested outputs", MAX_OUTPUTS);
    let mut raw = Counter::new("raw_input_contents", MAX_INPUTS);
    let mut decoded = 0usize;
    for field in fields(message) {
        match field? {
            (4, _) => parameters.add(1)?,
            (5, Value::Bytes(input)) => {
                inputs.add(1)?;
                decoded = decoded.saturating_add(check_input(input)?);
            }
            (6, Value::Bytes(output)) => {
                outputs.add(1)?;
                let mut output_parameters = Counter::new("an output's parameters", MAX_PARAMETERS);
                for field in fields(output) {
                    if let (2, _) = field? {
                        output_parameters.add(1)?;
                    }
                }
            }
            (7, _) => raw.add(1)?,
            _ => {}
        }
    }
    let limit = message
        .len()
        .saturating_mul(MAX_CONTENT_AMPLIFICATION)
        .saturating_add(CONTENT_SLACK);
    if decoded > limit {
        return Err(BudgetError::TooLarge {
            decoded,
            limit,
            size: message.len(),
        });
    }
    Ok(())
}

/// Checks one `InferInputTensor`; returns what its contents decode to, in bytes.
fn check_input(input: &[u8]) -> Result<usize, BudgetError> {
    let mut parameters = Counter::new("an input's parameters", MAX_PARAMETERS);
    let mut dims = Counter::new("shape dimensions", MAX_DIMS);
    let mut decoded = 0usize;
    for field in fields(input) {
        match field? {
            (3, Value::Bytes(packed)) => dims.add(packed_varints(packed))?,
            (3, _) => dims.add(1)?,
            (4, _) => parameters.add(1)?,
            (5, Value::Bytes(contents)) => decoded = decoded.saturating_add(contents_cost(contents)?),
            _ => {}
        }
    }
    Ok(decoded)
}

/// What an `InferTensorContents` decodes to, in bytes: each repeated field's element
/// size times its count, packed or not.
fn contents_cost(contents: &[u8]) -> Result<usize, BudgetError> {
    let mut cost = 0usize;
    for field in fields(contents) {
        let (number, value) = field?;
        let element = match number {
            1 => 1,         // bool
            2 | 4 | 6 => 4, // int32, uint32, float
            3 | 5 | 7 => 8, // int64, uint64, double
            8 => {
                let len = match value {
                    Value::Bytes(bytes) => bytes.len(),
                    _ => 0,
                };
                cost = cost.saturating_add(BYTES_ENTRY_COST + len);
                continue;
            }
            _ => continue,
        };
        let count = match value {
            Value::Bytes(packed) if number == 6 || number == 7 => packed.len() / element,
            Value::Bytes(packed) => packed_varints(packed),
            Value::Varint | Value::Fixed => 1,
        };
        cost = cost.saturating_add(count.saturating_mul(element));
    }
    Ok(cost)
}

/// A `ModelInferRequest` with its inputs' typed `contents` taken out, so that they can be
/// decoded into vectors sized beforehand: prost grows a repeated field by doubling as it
/// decodes, which for a large tensor holds up to three times its size at once.
pub struct Split<'a> {
    /// The message without any input's `contents` (small: names, shapes, parameters).
    pub rest: Vec<u8>,
    /// Each input's `contents` fields (usually one), in input order.
    pub contents: Vec<Vec<&'a [u8]>>,
}

/// [`Split`] for a message (already checked by [`check_infer_request`]); None when no
/// input has typed contents (prost then decodes the message as it is).
pub fn split_contents(message: &[u8]) -> Result<Option<Split<'_>>, BudgetError> {
    let mut any = false;
    for field in fields(message) {
        if let (5, Value::Bytes(input)) = field? {
            for field in fields(input) {
                any |= matches!(field?, (5, Value::Bytes(_)));
            }
        }
    }
    if !any {
        return Ok(None);
    }
    let mut rest = Vec::new();
    let mut contents = Vec::new();
    let mut walk = fields(message);
    while !walk.rest.is_empty() {
        let (number, value, raw) = walk.field_raw()?;
        let (5, Value::Bytes(input)) = (number, value) else {
            rest.extend_from_slice(raw);
            continue;
        };
        let mut kept = Vec::new();
        let mut own = Vec::new();
        let mut input_walk = fields(input);
        while !input_walk.rest.is_empty() {
            match input_walk.field_raw()? {
                (5, Value::Bytes(slice), _) => own.push(slice),
                (_, _, raw) => kept.extend_from_slice(raw),
            }
        }
        rest.push(5 << 3 | 2);
        put_varint(&mut rest, kept.len() as u64);
        rest.extend_from_slice(&kept);
        contents.push(own);
    }
    Ok(Some(Split { rest, contents }))
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// How many elements each field of `InferTensorContents` (by number, 1 to 8) gets from
/// `slices`, packed or not.
pub fn contents_counts(slices: &[&[u8]]) -> Result<[usize; 9], BudgetError> {
    let mut counts = [0usize; 9];
    for slice in slices {
        for field in fields(slice) {
            let (number, value) = field?;
            let Ok(index) = usize::try_from(number) else { continue };
            let Some(count) = counts.get_mut(index) else { continue };
            let n = match (number, value) {
                (6, Value::Bytes(packed)) => packed.len() / 4,
                (7, Value::Bytes(packed)) => packed.len() / 8,
                (1..=5, Value::Bytes(packed)) => packed_varints(packed),
                _ => 1,
            };
            *count = count.saturating_add(n);
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::protocol::grpc::proto::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
    use crate::protocol::grpc::proto::{InferTensorContents, ModelInferRequest};

    fn input(contents: InferTensorContents) -> InferInputTensor {
        InferInputTensor {
            name: "x".into(),
            datatype: "INT64".into(),
            shape: vec![1],
            contents: Some(contents),
            ..Default::default()
        }
    }

    #[test]
    fn ordinary_requests_pass() {
        let request = ModelInferRequest {
            model_name: "digits".into(),
            inputs: vec![input(InferTensorContents {
                fp32_contents: vec![0.5; 64 * 32],
                ..Default::default()
            })],
            outputs: vec![InferRequestedOutputTensor {
                name: "label".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(check_infer_request(&request.encode_to_vec()), Ok(()));
    }

    #[test]
    fn many_tiny_entries_are_refused_before_decoding() {
        let request = ModelInferRequest {
            inputs: vec![InferInputTensor::default(); MAX_INPUTS + 1],
            ..Default::default()
        };
        assert_eq!(
            check_infer_request(&request.encode_to_vec()),
            Err(BudgetError::TooMany {
                what: "inputs",
                limit: MAX_INPUTS
            })
        );
        let request = ModelInferRequest {
            outputs: vec![InferRequestedOutputTensor::default(); MAX_OUTPUTS + 1],
            ..Default::default()
        };
        assert!(check_infer_request(&request.encode_to_vec()).is_err());
    }

    #[test]
    fn contents_that_decode_to_many_times_the_message_are_refused() {
        // Packed one-byte varints of int64: eight bytes each once decoded.
        let amplified = ModelInferRequest {
            inputs: vec![input(InferTensorContents {
                int64_contents: vec![1; 4 << 20],
                ..Default::default()
            })],
            ..Default::default()
        };
        let bytes = amplified.encode_to_vec();
        assert!(matches!(check_infer_request(&bytes), Err(BudgetError::TooLarge { .. })));
        // Empty strings: a Vec each.
        let strings = ModelInferRequest {
            inputs: vec![input(InferTensorContents {
                bytes_contents: vec![Vec::new(); 1 << 20],
                ..Default::default()
            })],
            ..Default::default()
        };
        assert!(matches!(
            check_infer_request(&strings.encode_to_vec()),
            Err(BudgetError::TooLarge { .. })
        ));
        assert_eq!(check_infer_request(&[0xff]), Err(BudgetError::Malformed));
    }
}
