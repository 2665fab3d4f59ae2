//! Deadlines of ONNX Runtime computes: one thread, started on first use, that terminates
//! a compute's `RunOptions` when its deadline passes (ONNX Runtime then stops between
//! two nodes and the compute fails). A compute registers for as long as it runs; the
//! thread is woken only when a deadline earlier than the one it sleeps until arrives.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use ort::session::RunOptions;

use crate::sync::{lock, wait, wait_timeout};

struct Watched {
    id: u64,
    deadline: Instant,
    options: Arc<RunOptions>,
}

#[derive(Default)]
struct Queue {
    watched: Vec<Watched>,
    next_id: u64,
    /// When the thread wakes next (`None`: it sleeps until woken).
    wakes_at: Option<Instant>,
}

struct Watch {
    queue: Mutex<Queue>,
    changed: Condvar,
}

static WATCH: OnceLock<Option<Arc<Watch>>> = OnceLock::new();

/// A compute under watch; dropping it ends the watch.
pub struct Watching {
    id: u64,
    watch: Arc<Watch>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut queue = lock(&self.watch.queue);
        queue.watched.retain(|w| w.id != self.id);
    }
}

/// Terminates `options` at `deadline` unless the returned guard is dropped first; `None`
/// when the watching thread cannot be started (the compute then runs unwatched, and is
/// still refused at the deadline before it starts).
pub fn watch(deadline: Instant, options: Arc<RunOptions>) -> Option<Watching> {
    let watch = WATCH.get_or_init(start).clone()?;
    let id = {
        let mut queue = lock(&watch.queue);
        let id = queue.next_id;
        queue.next_id += 1;
        queue.watched.push(Watched { id, deadline, options });
        if queue.wakes_at.is_none_or(|at| deadline < at) {
            watch.changed.notify_one();
        }
        id
    };
    Some(Watching { id, watch })
}

fn start() -> Option<Arc<Watch>> {
    let watch = Arc::new(Watch {
        queue: Mutex::new(Queue::default()),
        changed: Condvar::new(),
    });
    let thread_watch = watch.clone();
    std::thread::Builder::new()
        .name("tensorplug-ort-deadlines".into())
        .spawn(move || run(&thread_watch))
        .ok()?;
    Some(watch)
}

fn run(watch: &Watch) {
    let mut queue = lock(&watch.queue);
    loop {
        let now = Instant::now();
        queue.watched.retain(|w| {
            if w.deadline <= now {
                // A failed terminate leaves the compute to end on its own, past its
                // deadline: the host still answers it as a time limit.
                let _ = w.options.terminate();
                false
            } else {
                true
            }
        });
        let next = queue.watched.iter().map(|w| w.deadline).min();
        queue.wakes_at = next;
        queue = match next {
            Some(at) => wait_timeout(&watch.changed, queue, at.saturating_duration_since(now)),
            None => wait(&watch.changed, queue),
        };
    }
}
