//! Captured guest stdout/stderr.
//!
//! Each store writes its guest's stdout and stderr into a bounded in-memory buffer that
//! the host drains after every call: the text goes to the host's log (tagged with the
//! model and stage) and, after a trap, into the error message — that is where a Rust
//! guest's panic message ends up. What a guest writes past the buffer between two calls
//! is dropped and counted (the drained text ends with how much): the stream stays open, so
//! a plugin's `print` never fails (Python raised `BrokenPipeError` on a closed stream,
//! which failed the item), and host memory stays bounded whatever the plugin does.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How much a guest may write in one go (`check-write`): the WASI stream's usual permit.
const WRITE_PERMIT: usize = 4096;

/// A bounded, drainable output buffer shared between a store's WASI context and the host.
#[derive(Clone, Debug)]
pub struct CapturedOutput {
    buffer: Arc<Mutex<Captured>>,
    capacity: usize,
}

/// What was written since the last drain: the bytes kept, and how many were dropped.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

impl CapturedOutput {
    /// A buffer that holds at most `capacity` bytes between drains.
    pub fn new(capacity: usize) -> Self {
        Self {
            buffer: Arc::default(),
            capacity,
        }
    }

    /// Takes everything written since the last drain, as (lossy) UTF-8 text, ending with
    /// a line saying how many bytes were dropped, if any were.
    pub fn drain(&self) -> String {
        let Captured { kept, dropped } = std::mem::take(&mut *self.lock());
        // Valid UTF-8 (the usual case) becomes the text as it is, uncopied.
        let mut text = String::from_utf8(kept).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if dropped > 0 {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[{dropped} more bytes of output dropped: at most {} are kept per call]",
                self.capacity
            ));
        }
        text
    }

    fn lock(&self) -> MutexGuard<'_, Captured> {
        // A poisoned lock only means another thread panicked mid-append; the bytes are
        // still a valid Vec, so keep using them.
        crate::sync::lock(&self.buffer)
    }

    /// Keeps what fits of `bytes` and counts the rest as dropped.
    fn append(&self, bytes: &[u8]) {
        let mut captured = self.lock();
        let n = bytes.len().min(self.capacity.saturating_sub(captured.kept.len()));
        captured.kept.extend_from_slice(&bytes[..n]);
        captured.dropped += (bytes.len() - n) as u64;
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always room: what does not fit is dropped, not refused.
        Ok(WRITE_PERMIT)
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
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
    fn keeps_what_fits_drops_and_counts_the_rest_and_never_closes() {
        let mut out = CapturedOutput::new(8);
        out.write(Bytes::from_static(b"hello")).unwrap();
        // Past the capacity: still accepted (a closed stream fails a Python `print`).
        out.write(Bytes::from_static(b"world")).unwrap();
        assert!(out.check_write().is_ok_and(|permit| permit > 0));
        out.write(Bytes::from(vec![b'x'; 1000])).unwrap();
        assert_eq!(
            out.drain(),
            "hellowor\n[1002 more bytes of output dropped: at most 8 are kept per call]"
        );
        assert_eq!(out.drain(), "");
        out.write(Bytes::from_static(b"again")).unwrap();
        assert_eq!(out.drain(), "again");
    }
}
