//! tonic-reflection drops a request message that does not decode and ends its stream with
//! `OK`. This follows a reflection call's request messages as they arrive and flags a
//! malformed one (not protobuf, a compressed flag other than 0 and 1, cut short by the end
//! of the stream), so that the edge answers it `INVALID_ARGUMENT` as every other RPC, and
//! a compressed one (the server accepts no compression) `INTERNAL` as the gRPC spec asks
//! ([`super::paced`] rewrites the final status).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use prost::Message;
use tonic_reflection::pb::v1::ServerReflectionRequest;

/// Largest reflection message followed (tonic refuses larger ones itself, at 4 MiB).
const MAX_MESSAGE: usize = 4 << 20;

/// What the check found: nothing wrong yet.
pub const FINE: u8 = 0;
/// A malformed message or framing (`INVALID_ARGUMENT`).
pub const MALFORMED: u8 = 1;
/// A compressed message without a `grpc-encoding` (`INTERNAL`, as the gRPC spec asks).
pub const COMPRESSED: u8 = 2;

/// See the module's documentation.
pub struct ReflectionCheck {
    flagged: Arc<AtomicU8>,
    prefix: Vec<u8>,
    payload: Vec<u8>,
    remaining: usize,
}

impl ReflectionCheck {
    pub fn new(flagged: Arc<AtomicU8>) -> Self {
        Self {
            flagged,
            prefix: Vec::with_capacity(5),
            payload: Vec::new(),
            remaining: 0,
        }
    }

    fn flag(&self) {
        self.flagged.store(MALFORMED, Ordering::Relaxed);
    }

    /// Follows the next bytes of the request body.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.flagged.load(Ordering::Relaxed) == FINE {
            if self.prefix.len() < 5 {
                let take = (5 - self.prefix.len()).min(data.len());
                self.prefix.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.prefix.len() == 5 {
                    let len = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
                    self.remaining = usize::try_from(len).unwrap_or(usize::MAX);
                    if self.prefix[0] == 1 {
                        // The server takes no compressed requests.
                        self.flagged.store(COMPRESSED, Ordering::Relaxed);
                    } else if self.prefix[0] > 1 || self.remaining > MAX_MESSAGE {
                        self.flag();
                    } else if self.remaining == 0 {
                        self.message_done();
                    }
                }
            } else {
                let take = self.remaining.min(data.len());
                self.payload.extend_from_slice(&data[..take]);
                self.remaining -= take;
                data = &data[take..];
                if self.remaining == 0 {
                    self.message_done();
                }
            }
        }
    }

    fn message_done(&mut self) {
        if self.prefix[0] == 0 && ServerReflectionRequest::decode(self.payload.as_slice()).is_err() {
            self.flag();
        }
        self.prefix.clear();
        self.payload.clear();
    }

    /// The request body ended: a message begun and not finished is malformed.
    pub fn end(&self) {
        if !self.prefix.is_empty() {
            self.flag();
        }
    }
}
