//! The inference service's codec: prost's, with every `ModelInferRequest` checked on its
//! wire bytes ([`super::budget`]) before it is decoded, and its tensor contents decoded
//! into vectors sized from the wire (prost would grow them by doubling).

use std::any::{Any, TypeId};
use std::marker::PhantomData;

use bytes::Buf;
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use super::budget::{check_infer_request, contents_counts, split_contents};
use super::status::{edge_status, status, EdgeError};
use crate::protocol::grpc::proto::{InferTensorContents, ModelInferRequest};

/// [`ProstCodec`] with the decode-cost check in front of its decoder.
#[derive(Debug)]
pub struct CheckedCodec<T, U> {
    inner: ProstCodec<T, U>,
}

impl<T, U> Default for CheckedCodec<T, U> {
    fn default() -> Self {
        Self {
            inner: ProstCodec::default(),
        }
    }
}

impl<T, U> Codec for CheckedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = CheckedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.inner.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        CheckedDecoder {
            inner: self.inner.decoder(),
            _message: PhantomData,
        }
    }
}

/// Checks and decodes inference requests; decodes other messages as prost does.
#[derive(Debug)]
pub struct CheckedDecoder<U> {
    inner: ProstDecoder<U>,
    _message: PhantomData<U>,
}

impl<U: Message + Default + 'static> Decoder for CheckedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // Only inference requests carry tensors; the other messages are small by shape.
        if TypeId::of::<U>() != TypeId::of::<ModelInferRequest>() {
            return self.inner.decode(buf);
        }
        let bytes = buf.chunk();
        // tonic hands a whole message in one buffer; anything else is not checked and so
        // not decoded.
        if bytes.len() != buf.remaining() {
            return Err(status(
                Code::Internal,
                "the request could not be checked before decoding",
            ));
        }
        let message = decode_infer_request(bytes).map_err(|e| edge_status(&e))?;
        let len = buf.remaining();
        buf.advance(len);
        // U is ModelInferRequest (checked above); handed over without a copy.
        let mut message = Some(message);
        Ok((&mut message as &mut dyn Any)
            .downcast_mut::<Option<U>>()
            .and_then(Option::take))
    }
}

/// A `ModelInferRequest` from its wire bytes: checked against the caps and the content
/// budget, then decoded, each input's typed contents into vectors of the exact size.
pub fn decode_infer_request(bytes: &[u8]) -> Result<ModelInferRequest, EdgeError> {
    check_infer_request(bytes)?;
    let Some(split) = split_contents(bytes)? else {
        return Ok(ModelInferRequest::decode(bytes)?);
    };
    let mut message = ModelInferRequest::decode(split.rest.as_slice())?;
    for (input, slices) in message.inputs.iter_mut().zip(split.contents) {
        if slices.is_empty() {
            continue;
        }
        let counts = contents_counts(&slices)?;
        let mut contents = InferTensorContents {
            bool_contents: Vec::with_capacity(counts[1]),
            int_contents: Vec::with_capacity(counts[2]),
            int64_contents: Vec::with_capacity(counts[3]),
            uint_contents: Vec::with_capacity(counts[4]),
            uint64_contents: Vec::with_capacity(counts[5]),
            fp32_contents: Vec::with_capacity(counts[6]),
            fp64_contents: Vec::with_capacity(counts[7]),
            bytes_contents: Vec::with_capacity(counts[8]),
        };
        // Several `contents` fields merge, as protobuf has it.
        for slice in slices {
            contents.merge(slice)?;
        }
        input.contents = Some(contents);
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::grpc::proto::model_infer_request::InferInputTensor;

    #[test]
    fn split_decoding_gives_what_prost_gives() {
        let input = |name: &str, contents: Option<InferTensorContents>| InferInputTensor {
            name: name.into(),
            datatype: "FP32".into(),
            shape: vec![1, 3],
            contents,
            ..Default::default()
        };
        let message = ModelInferRequest {
            model_name: "m".into(),
            id: "i".into(),
            inputs: vec![
                input(
                    "a",
                    Some(InferTensorContents {
                        fp32_contents: vec![1.0, 2.0, 3.0],
                        int64_contents: vec![-1, 300, 1 << 40],
                        bytes_contents: vec![b"x".to_vec(), Vec::new()],
                        ..Default::default()
                    }),
                ),
                input("b", None),
                input(
                    "c",
                    Some(InferTensorContents {
                        bool_contents: vec![true, false],
                        uint_contents: vec![7; 1000],
                        ..Default::default()
                    }),
                ),
            ],
            raw_input_contents: Vec::new(),
            ..Default::default()
        };
        let bytes = message.encode_to_vec();
        let decoded = decode_infer_request(&bytes).unwrap();
        assert_eq!(decoded, message);
        let contents = decoded.inputs[2].contents.as_ref().unwrap();
        assert_eq!(contents.uint_contents.capacity(), 1000);
        // Without contents, prost decodes the message as it is.
        let plain = ModelInferRequest {
            inputs: vec![input("a", None)],
            raw_input_contents: vec![vec![0; 12]],
            ..Default::default()
        };
        assert_eq!(decode_infer_request(&plain.encode_to_vec()).unwrap(), plain);
        // Malformed contents are refused, not decoded in part.
        let mut broken = bytes.clone();
        broken.truncate(bytes.len() - 1);
        assert!(decode_infer_request(&broken).is_err());
    }
}
