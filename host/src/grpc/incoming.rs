//! The gRPC port's connections, under the same bounds as REST's: one connection cap shared
//! by both ports (so the descriptor reserve holds whatever the mix), and an idle timeout.
//!
//! A connection beyond the cap is closed at once (gRPC clients see `UNAVAILABLE` and
//! retry). A connection on which nothing is read or written for the idle timeout is
//! closed: one that never sends the HTTP/2 preface, or whose client stopped answering.
//! The server pings every connection at a third of that timeout (HTTP/2 PING, answered by
//! every gRPC client), so a healthy connection is never idle that long, even while a long
//! call runs or a `Watch` stream waits for news.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Pause after an accept error such as EMFILE, so that a failing accept does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The bounds of the gRPC port's connections.
#[derive(Clone)]
pub struct ConnectionBounds {
    /// Connection slots shared with the REST port.
    pub slots: Arc<Semaphore>,
    /// A connection with no I/O for this long is closed.
    pub idle_timeout: Duration,
}

impl ConnectionBounds {
    /// The interval of the server's HTTP/2 pings: a third of the idle timeout, so that
    /// a ping and its answer always fall inside it.
    pub fn ping_interval(&self) -> Duration {
        self.idle_timeout / 3
    }
}

/// Accepts connections on `listener` while the returned stream is alive; each carries a
/// connection slot until it closes. `on_refused` runs for each connection closed because
/// every slot was taken.
pub fn accept(
    listener: TcpListener,
    bounds: ConnectionBounds,
    on_refused: impl Fn() + Send + 'static,
) -> ReceiverStream<io::Result<BoundedStream>> {
    // Room for a few: the server takes each connection as soon as it is accepted.
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _)) => match bounds.slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        let _ = stream.set_nodelay(true);
                        let stream = BoundedStream::new(stream, slot, bounds.idle_timeout);
                        if tx.send(Ok(stream)).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => {
                        on_refused();
                        drop(stream);
                    }
                },
                Err(error) => {
                    tracing::debug!("accepting a gRPC connection: {error}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// A connection holding its slot, closed once idle for too long.
pub struct BoundedStream {
    stream: TcpStream,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl BoundedStream {
    fn new(stream: TcpStream, slot: OwnedSemaphorePermit, idle_timeout: Duration) -> Self {
        Self {
            stream,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            _slot: slot,
        }
    }

    fn active(&mut self) {
        self.idle.as_mut().reset(Instant::now() + self.idle_timeout);
    }

    /// Whether the idle timeout has passed; registers for a wake-up when it will.
    fn timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        self.idle.as_mut().poll(cx).is_ready()
    }
}

fn idle_error() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "connection idle past the idle timeout")
}

impl AsyncRead for BoundedStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(result)
            }
            Poll::Pending if self.timed_out(cx) => Poll::Ready(Err(idle_error())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for BoundedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write(cx, data) {
            Poll::Ready(Ok(written)) => {
                if written > 0 {
                    self.active();
                }
                Poll::Ready(Ok(written))
            }
            Poll::Pending if self.timed_out(cx) => Poll::Ready(Err(idle_error())),
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Connected for BoundedStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}
