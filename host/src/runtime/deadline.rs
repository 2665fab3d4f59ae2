//! Running one plugin call to completion or to its deadline, whichever comes first.
//!
//! Calls are async (wasmtime's `call_async`, async WASI) and driven here on the calling
//! thread. Two mechanisms hold the deadline together:
//! - wasm code checks the engine's epoch and traps when the store's epoch deadline
//!   passes ([`super::EPOCH_TICK`] resolution);
//! - a call parked in a host call (a sleep, a poll, a blocking read) checks no epoch, so
//!   the call's future is raced against a timer and dropped when the timer wins. The
//!   store is then unusable, and the pipeline replaces the instance as after any trap.
//!
//! Plugins never run as tasks of the server's runtime: instance threads, the blocking
//! pool and the idle path (a runtime thread inside `block_in_place`, out of the runtime's
//! context) drive calls with `block_on` on a small current-thread runtime kept per thread,
//! never on the server's runtime, so that its shutdown cannot cancel a plugin's I/O
//! halfway through a call.

use std::future::Future;
use std::time::Instant;

/// The call did not finish within its time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlinePassed;

thread_local! {
    /// This thread's executor, built on first use.
    static EXECUTOR: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok();
}

/// Drives `call` on this thread until it finishes or `until` passes (the instant the
/// store's `wasi:nn` compute also runs to, see [`super::store::StoreState::arm_deadline`]).
pub fn within<F: Future>(until: Instant, call: F) -> Result<F::Output, DeadlinePassed> {
    EXECUTOR.with(|executor| match executor {
        Some(executor) => executor.block_on(async move {
            tokio::time::timeout_at(until.into(), call)
                .await
                .map_err(|_| DeadlinePassed)
        }),
        // Building a current-thread runtime only fails when the OS refuses its
        // resources; without a timer the epoch deadline still stops wasm code.
        None => Ok(block_on_without_timer(call)),
    })
}

/// Polls a future to completion on this thread, with no timer (see [`within`]).
fn block_on_without_timer<F: Future>(future: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_call_parked_past_its_limit_is_dropped_at_the_limit() {
        let started = std::time::Instant::now();
        let parked = within(Instant::now() + Duration::from_millis(50), async {
            tokio::time::sleep(Duration::from_secs(5)).await
        });
        assert_eq!(parked, Err(DeadlinePassed));
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(within(Instant::now() + Duration::from_secs(1), async { 7 }), Ok(7));
    }
}
