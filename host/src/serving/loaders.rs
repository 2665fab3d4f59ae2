//! The loader threads: where models load and instances are added (reading compiled code
//! back, instantiating, running plugins' `init`), at a lower CPU priority than the threads
//! that serve, so that a storm of cold loads takes the cores only as far as the requests
//! of resident models leave them.

use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

/// How much lower loader threads run than the server (nice values): under contention
/// the kernel gives a thread 10 nice values lower about a tenth of the other's CPU time,
/// and all of it when the serving threads wait.
const LOWER_BY: i32 = 10;

/// How many models load at once: one per core, up to four.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4))
}

/// How many loader threads there are: twice the loads at once, at least four. A loader
/// thread often only waits (for a compile on its own thread, for a plugin's `init`), and
/// two slow compiles (a Python component's take tens of seconds) must not hold every
/// other model's load, an instance added or an eviction's unmapping behind them.
fn pool_threads() -> usize {
    (threads() * 2).clamp(4, 8)
}

/// Work on a loader thread panicked; what it said.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoaderPanicked(pub String);

/// Runs `work` on a loader thread and returns what it returns.
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, LoaderPanicked> {
    let (done, result) = tokio::sync::oneshot::channel();
    submit(move || {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(work));
        let _ = done.send(outcome.map_err(|panic| LoaderPanicked(panic_text(&*panic))));
    });
    result
        .await
        .unwrap_or_else(|_| Err(LoaderPanicked("the loader thread stopped".into())))
}

/// Starts `work` on a loader thread (a panic in it is logged, not propagated).
pub fn spawn(work: impl FnOnce() + Send + 'static) {
    submit(move || {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(work)) {
            tracing::error!("work on a loader thread panicked: {}", panic_text(&*panic));
        }
    });
}

/// Drops `value` on a loader thread, unless this is one: dropping a store unmaps its
/// memories and stack, and dropping a model's last compiled code unmaps that. Each
/// unmapping takes the process's address-space lock for writing and interrupts every core
/// running the server to flush its TLB, which must not happen on a thread that serves.
pub fn drop_off_serving_threads<T: Send + 'static>(value: T) {
    if rayon::current_thread_index().is_some() {
        drop(value);
    } else {
        spawn(move || drop(value));
    }
}

/// Queues `work`, which must not panic (a panic on a rayon thread aborts the process).
fn submit(work: impl FnOnce() + Send + 'static) {
    match pool() {
        Some(pool) => pool.spawn(work),
        // Without loader threads (the OS refused them), on the blocking pool as before.
        None => drop(tokio::task::spawn_blocking(work)),
    }
}

/// The message of a caught panic, when it has one.
pub(super) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(pool_threads())
            .thread_name(|i| format!("tensorplug-load-{i}"))
            .start_handler(|_| lower_this_threads_priority())
            .build()
            .inspect_err(|error| tracing::warn!("no loader threads ({error}): models load at the server's priority"))
            .ok()
    })
    .as_ref()
}

/// Lowers the calling thread's CPU priority by [`LOWER_BY`] nice values (Linux: nice is
/// per thread).
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid, getpriority and setpriority (below) take plain integers and
        // touch no memory of ours.
        let thread = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        // SAFETY: as above.
        let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, thread) };
        let lowered = (now + LOWER_BY).min(19);
        // SAFETY: as above.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, thread, lowered) } != 0 {
            tracing::debug!(
                "a loader thread keeps the server's priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    fn this_threads_nice() -> i32 {
        // SAFETY: as in lower_this_threads_priority.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as libc::id_t) }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn loads_run_at_a_lower_priority_than_the_server() {
        let server = this_threads_nice();
        let loader = run(this_threads_nice).await.unwrap();
        assert_eq!(loader, (server + LOWER_BY).min(19));
    }

    /// Records the name of the thread it is dropped on.
    struct DroppedOn(std::sync::mpsc::Sender<Option<String>>);

    impl Drop for DroppedOn {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().name().map(str::to_owned));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_a_serving_thread_lets_go_of_is_dropped_on_a_loader_thread() {
        let (sender, dropped) = std::sync::mpsc::channel();
        drop_off_serving_threads(DroppedOn(sender.clone()));
        let thread = dropped.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        assert!(
            thread
                .as_deref()
                .is_some_and(|name| name.starts_with("tensorplug-load-")),
            "{thread:?}"
        );
        // On a loader thread already: dropped there and then, not queued behind loads.
        let on_loader = run(move || {
            drop_off_serving_threads(DroppedOn(sender));
            std::thread::current().name().map(str::to_owned)
        });
        let loader = on_loader.await.unwrap();
        assert_eq!(dropped.try_recv().unwrap(), loader);
    }

    #[tokio::test]
    async fn a_panicking_load_is_an_error_and_the_threads_go_on() {
        let panicked = run(|| -> u32 { panic!("init exploded") }).await;
        assert_eq!(panicked.unwrap_err().0, "init exploded");
        for _ in 0..threads() * 2 {
            assert_eq!(run(|| 7).await.unwrap(), 7);
        }
    }
}
