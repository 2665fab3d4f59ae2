//! Captured guest stdout/stderr.
//!
//! Each store writes its guest's stdout and stderr into a bounded in-memory buffer that
//! the host drains after every call: the text goes to the host's log (tagged with the
//! model and stage) and, after a trap, into the error message — that is where a Rust
//! guest's panic message ends up. A guest that writes more than the buffer holds between
//! two calls sees its stream closed, which bounds host memory whatever the plugin does.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// A bounded, drainable output buffer shared between a store's WASI context and the host.
#[derive(Clone, Debug)]
pub struct CapturedOutput {
    buffer: Arc<Mutex<Vec<u8>>>,
    capacity: usize,
}

impl CapturedOutput {
    /// A buffer that holds at most `capacity` bytes between drains.
    pub fn new(capacity: usize) -> Self {
        Self {
            buffer: Arc::new(Mutex::new(Vec::new())),
            capacity,
        }
    }

    /// Takes everything written since the last drain, as (lossy) UTF-8 text.
    pub fn drain(&self) -> String {
        let mut buffer = self.lock();
        let text = String::from_utf8_lossy(&buffer).into_owned();
        buffer.clear();
        text
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        // A poisoned lock only means another thread panicked mid-append; the bytes are
        // still a valid Vec, so keep using them.
        crate::sync::lock(&self.buffer)
    }

    fn room(&self) -> usize {
        self.capacity.saturating_sub(self.lock().len())
    }

    fn append(&self, bytes: &[u8]) -> usize {
        let mut buffer = self.lock();
        let n = bytes.len().min(self.capacity.saturating_sub(buffer.len()));
        buffer.extend_from_slice(&bytes[..n]);
        n
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if self.append(&bytes) < bytes.len() {
            return Err(StreamError::Closed);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        match self.room() {
            0 => Err(StreamError::Closed),
            room => Ok(room),
        }
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.append(buf) {
            0 if !buf.is_empty() => Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            n => Poll::Ready(Ok(n)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_and_bounds() {
        let mut out = CapturedOutput::new(8);
        assert_eq!(out.check_write().ok(), Some(8));
        out.write(Bytes::from_static(b"hello")).unwrap();
        assert!(out.write(Bytes::from_static(b"world")).is_err());
        assert_eq!(out.drain(), "hellowor");
        assert_eq!(out.drain(), "");
        assert_eq!(out.check_write().ok(), Some(8));
    }
}
