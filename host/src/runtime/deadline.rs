//! Running one plugin call to completion or to its deadline, whichever comes first.
//!
//! Calls are async (wasmtime's `call_async`, async WASI) and driven here on the calling
//! thread. Two mechanisms hold the deadline together:
//! - wasm code checks the engine's epoch and traps when the store's epoch deadline
//!   passes ([`EPOCH_TICK`] resolution);
//! - a call parked in a host call (a sleep, a poll, a blocking read) checks no epoch, so
//!   the call's future is raced against a timer and dropped when the timer wins. The
//!   store is then unusable, and the pipeline replaces the instance as after any trap.
//!
//! Plugins never run as tasks of the server's runtime: instance threads and the blocking
//! pool drive calls with `block_on` on a small current-thread runtime kept per thread,
//! never on the server's runtime, so that its shutdown cannot cancel a plugin's I/O
//! halfway through a call. The idle path (`serving::idle`) runs a call on a runtime thread
//! itself, within a task, where no runtime may be started ([`on_this_runtime_thread`]):
//! there the call is polled on the spot; one that waits hands the thread's place in the
//! runtime to another before it parks, and its timer is the server runtime's.

use std::future::Future;
use std::time::{Duration, Instant};

/// Wall time between two epoch increments (the engine's ticker): the resolution of every
/// time limit.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Converts a time limit into epoch ticks (at least one).
pub(crate) fn deadline_ticks(limit: Duration) -> u64 {
    (limit.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64
}

/// The call did not finish within its time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlinePassed;

thread_local! {
    /// Whether calls on this thread run inside a task of the server's runtime.
    static ON_RUNTIME_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread's executor, built on first use.
    static EXECUTOR: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok();
}

/// The longest wasm code runs on a runtime thread (the idle path) before the call yields,
/// handing the thread's place in the runtime to another (see [`within_here`]) and going
/// on: how long the server's sockets may go unwatched while a plugin computes there.
pub(crate) const RUNTIME_THREAD_SLICE: Duration = Duration::from_millis(2);

/// Whether plugin calls on this thread run inside a task of the server's runtime.
pub(crate) fn on_runtime_thread() -> bool {
    ON_RUNTIME_THREAD.with(std::cell::Cell::get)
}

/// Runs `work`, which keeps this thread busy without waiting (native compute inside a
/// host call), after handing the thread's place in the server's runtime to another if
/// this is one of its threads (see [`within_here`]).
pub(crate) fn busy<T>(work: impl FnOnce() -> T) -> T {
    if on_runtime_thread() {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// Runs `run`, whose plugin calls happen inside a task of the server's (multi-thread)
/// runtime, on this thread: they are polled where they are, with the runtime's timer.
pub fn on_this_runtime_thread<T>(run: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ON_RUNTIME_THREAD.with(|on| on.set(false));
        }
    }
    ON_RUNTIME_THREAD.with(|on| on.set(true));
    let _reset = Reset;
    run()
}

/// Drives `call` on this thread until it finishes or `until` passes (the instant the
/// store's `wasi:nn` compute also runs to, see [`super::store::StoreState::arm_deadline`]).
pub fn within<F: Future>(until: Instant, call: F) -> Result<F::Output, DeadlinePassed> {
    if on_runtime_thread() {
        return within_here(until, call);
    }
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

/// [`within`] inside a task of the server's runtime: a call that does not wait (most:
/// wasm code alone) ends at its first poll, and costs no timer; one that waits (parked
/// in a host call) is then raced against the runtime's timer, this thread parked.
///
/// Before it parks, the thread hands its place in the runtime to another
/// (`block_in_place`): the runtime's timer and sockets are driven by whichever of its
/// threads sleeps in them, and a thread that went to sleep beside them while this one
/// held them is not woken to take them over. Parked without the hand-off, the call's
/// timer, its deadline and every connection of the server could wait for ever.
fn within_here<F: Future>(until: Instant, call: F) -> Result<F::Output, DeadlinePassed> {
    use std::task::{Context, Poll};
    // Outside the task's budget: the runtime's cooperative budget would otherwise make
    // the timer and the plugin's I/O answer "not yet" forever once spent.
    let mut call = std::pin::pin!(tokio::task::unconstrained(call));
    let waker = unpark_waker();
    if let Poll::Ready(output) = call.as_mut().poll(&mut Context::from_waker(&waker)) {
        return Ok(output);
    }
    tokio::task::block_in_place(|| {
        block_on_without_timer(tokio::task::unconstrained(tokio::time::timeout_at(until.into(), call)))
    })
    .map_err(|_| DeadlinePassed)
}

/// A waker that unparks this thread: one per thread, made on first use (a plugin call
/// on the idle path needs one for every call, and most never wake it).
fn unpark_waker() -> std::task::Waker {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    thread_local! {
        static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    }
    WAKER.with(Waker::clone)
}

/// Polls a future to completion on this thread, parking it while the future waits (its
/// timers, if any, are driven elsewhere; see [`within`]).
fn block_on_without_timer<F: Future>(future: F) -> F::Output {
    use std::task::{Context, Poll};

    let waker = unpark_waker();
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

    /// A call that waits inside a task of the server's runtime, woken there by the
    /// runtime's own timer (as a request is, by its socket), once the runtime's other
    /// thread has gone to sleep without the timer: nothing else would drive the timer, and
    /// the call, its deadline and every socket of the server would wait for ever.
    #[test]
    fn a_call_waiting_on_a_runtime_thread_still_meets_its_deadline() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            // Both threads idle: one sleeps in the timer, the other beside it.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let started = Instant::now();
            let parked = on_this_runtime_thread(|| {
                within(Instant::now() + Duration::from_millis(50), async {
                    tokio::time::sleep(Duration::from_secs(5)).await
                })
            });
            let _ = done.send((parked, started.elapsed()));
        });
        let outcome = finished.recv_timeout(Duration::from_secs(3));
        runtime.shutdown_background();
        let (parked, elapsed) = outcome.expect("the call never ended: the runtime's timer stopped");
        assert_eq!(parked, Err(DeadlinePassed));
        assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    }
}
