//! The inference service's codec: prost's, with every `ModelInferRequest` checked on its
//! wire bytes ([`super::budget`]) before it is decoded.

use std::any::TypeId;
use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use super::budget::check_infer_request;
use super::proto::ModelInferRequest;

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

/// Checks inference requests, then decodes as prost does.
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
        if TypeId::of::<U>() == TypeId::of::<ModelInferRequest>() {
            let bytes = bytes::Buf::chunk(buf);
            // tonic hands a whole message in one buffer; anything else is not checked
            // and so not decoded.
            if bytes.len() != bytes::Buf::remaining(buf) {
                return Err(Status::internal("the request could not be checked before decoding"));
            }
            check_infer_request(bytes)
                .map_err(|e| Status::invalid_argument(format!("request refused before decoding: {e}")))?;
        }
        self.inner.decode(buf)
    }
}
