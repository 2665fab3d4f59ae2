//! The hand-off from a model's batcher to its instance threads: a queue with many senders
//! and many receivers where an idle receiver goes to sleep at once and a send wakes one
//! only when one sleeps. Its receivers may also be started by the queue itself, as values
//! find none asleep, up to a number ([`queue_started_on_demand`]): a model whose requests
//! all take the idle path never has an instance thread at all.
//!
//! Why not a channel crate: `crossbeam-channel`'s receivers spin and then yield the CPU
//! several times before they sleep. On a machine with no more cores than busy threads
//! (the edge's runtime threads plus the instance threads), those turns are taken from the
//! edge: measured at REST c = 64 in docs/performance.md.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A queue's sending side; the queue closes when the last one is dropped.
pub struct Sender<T>(Arc<Shared<T>>);

/// A queue's receiving side; sends fail once the last one is dropped.
pub struct Receiver<T>(Arc<Shared<T>>);

/// Starts a receiver of its own (a thread that receives until the queue closes); an
/// error when it could not (the receiver it was given is dropped).
pub type Start<T> = Box<dyn Fn(Receiver<T>) -> std::io::Result<()> + Send + Sync>;

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    /// How receivers are started on demand, and at most how many in all.
    on_demand: Option<(Start<T>, usize)>,
}

struct State<T> {
    queue: VecDeque<T>,
    senders: usize,
    receivers: usize,
    /// Receivers asleep in [`Receiver::recv`].
    sleeping: usize,
    /// Receivers started on demand so far (one that failed to start is not counted).
    started: usize,
}

/// A new queue, open while both sides have a handle (a receiver to hand to the threads
/// of a test).
#[cfg(test)]
pub fn queue<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Shared::new(1, None);
    (Sender(shared.clone()), Receiver(shared))
}

/// A new queue without receivers, which starts one with `start` whenever a value is sent
/// and no receiver sleeps, up to `most` in all; open until its senders are gone, or until
/// the receivers it started are and it may start no more.
pub fn queue_started_on_demand<T>(most: usize, start: Start<T>) -> Sender<T> {
    Sender(Shared::new(0, Some((start, most))))
}

impl<T> Shared<T> {
    fn new(receivers: usize, on_demand: Option<(Start<T>, usize)>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                senders: 1,
                receivers,
                sleeping: 0,
                started: 0,
            }),
            ready: Condvar::new(),
            on_demand,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        crate::sync::lock(&self.state)
    }
}

impl<T> Sender<T> {
    /// Queues `value` for one receiver, waking a sleeping one or starting a new one; gives
    /// it back when every receiver is gone and no more may be started.
    pub fn send(&self, value: T) -> Result<(), T> {
        let mut state = self.0.lock();
        // How to start one more receiver, if this queue may.
        let start = (self.0.on_demand.as_ref())
            .filter(|(_, most)| state.started < *most)
            .map(|(start, _)| start);
        if state.receivers == 0 && start.is_none() {
            return Err(value);
        }
        state.queue.push_back(value);
        if state.sleeping > 0 {
            drop(state);
            self.0.ready.notify_one();
            return Ok(());
        }
        let Some(start) = start else {
            return Ok(()); // a busy receiver takes it when it is done
        };
        state.started += 1;
        state.receivers += 1;
        drop(state);
        // Outside the lock: starting a thread takes tens of microseconds. On failure the
        // receiver is dropped; if it was the last, what was queued goes with it (its
        // callers hear that nobody will answer), and the next send tries again.
        if let Err(error) = start(Receiver(self.0.clone())) {
            tracing::error!("cannot start a receiver (an instance thread): {error}");
            self.0.lock().started -= 1;
        }
        Ok(())
    }
}

impl<T> Receiver<T> {
    /// The next value, sleeping until one comes; `None` once the queue is empty and every
    /// sender is gone.
    pub fn recv(&self) -> Option<T> {
        let mut state = self.0.lock();
        loop {
            if let Some(value) = state.queue.pop_front() {
                return Some(value);
            }
            if state.senders == 0 {
                return None;
            }
            state.sleeping += 1;
            state = crate::sync::wait(&self.0.ready, state);
            state.sleeping -= 1;
        }
    }

    /// The next value if one is queued.
    #[cfg(test)]
    pub fn try_recv(&self) -> Option<T> {
        self.0.lock().queue.pop_front()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.lock().senders += 1;
        Sender(self.0.clone())
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.0.lock().receivers += 1;
        Receiver(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.senders -= 1;
        let last = state.senders == 0;
        drop(state);
        if last {
            self.0.ready.notify_all();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.receivers -= 1;
        // What nobody will receive is dropped now (outside the lock), not with the last sender.
        let unreceived = (state.receivers == 0).then(|| std::mem::take(&mut state.queue));
        drop(state);
        drop(unreceived);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn values_reach_receivers_on_other_threads_once_each() {
        let (tx, rx) = queue::<u32>();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || std::iter::from_fn(|| rx.recv()).collect::<Vec<_>>())
            })
            .collect();
        drop(rx);
        let senders: Vec<_> = (0..2)
            .map(|s| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for n in 0..1000 {
                        tx.send(s * 1000 + n).unwrap();
                        if n % 100 == 0 {
                            std::thread::sleep(Duration::from_millis(1)); // let receivers sleep
                        }
                    }
                })
            })
            .collect();
        for sender in senders {
            sender.join().unwrap();
        }
        drop(tx); // closes the queue: every receiver ends once it is drained
        let mut received: Vec<u32> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        received.sort_unstable();
        assert_eq!(received, (0..2000).collect::<Vec<_>>());
    }

    #[test]
    fn a_send_without_receivers_gives_the_value_back_and_queued_values_are_dropped() {
        let (tx, rx) = queue::<Arc<()>>();
        let value = Arc::new(());
        tx.send(value.clone()).unwrap();
        assert_eq!(Arc::strong_count(&value), 2);
        drop(rx);
        assert_eq!(
            Arc::strong_count(&value),
            1,
            "the queued value went with the last receiver"
        );
        assert!(tx.send(value).is_err());
    }

    /// The threads a queue started, each returning what it received.
    type Collectors = Arc<Mutex<Vec<std::thread::JoinHandle<Vec<u32>>>>>;

    /// A queue that starts receivers on demand (at most `most`) as threads collecting
    /// what they receive, which it returns once the queue is closed.
    fn started_on_demand(most: usize) -> (Sender<u32>, Collectors) {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let started = threads.clone();
        let tx = queue_started_on_demand(
            most,
            Box::new(move |rx: Receiver<u32>| {
                let thread = std::thread::spawn(move || std::iter::from_fn(|| rx.recv()).collect::<Vec<_>>());
                started.lock().unwrap().push(thread);
                Ok(())
            }),
        );
        (tx, threads)
    }

    #[test]
    fn receivers_are_started_only_when_none_sleeps_and_never_past_the_most() {
        let (tx, threads) = started_on_demand(3);
        assert_eq!(threads.lock().unwrap().len(), 0, "nothing sent, nothing started");
        tx.send(1).unwrap();
        // The one receiver started drains the queue and goes to sleep.
        while tx.0.lock().sleeping < 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        tx.send(2).unwrap();
        assert_eq!(
            threads.lock().unwrap().len(),
            1,
            "a sleeping receiver took the second value"
        );
        // Many values at once, while the receiver is busy or asleep: never past three.
        for n in 3..1000 {
            tx.send(n).unwrap();
        }
        let started = threads.lock().unwrap().len();
        assert!(
            (1..=3).contains(&started),
            "{started} receivers started, at most 3 wanted"
        );
        drop(tx);
        let mut received: Vec<u32> = std::mem::take(&mut *threads.lock().unwrap())
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        received.sort_unstable();
        assert_eq!(received, (1..1000).collect::<Vec<_>>(), "each value received once");
    }

    #[test]
    fn a_receiver_that_cannot_start_drops_what_waits_for_it_and_the_next_send_tries_again() {
        let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = attempts.clone();
        let tx = queue_started_on_demand(
            1,
            Box::new(move |rx: Receiver<Arc<()>>| {
                if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    drop(rx);
                    return Err(std::io::Error::other("no threads left"));
                }
                std::mem::forget(rx); // a receiver that never receives
                Ok(())
            }),
        );
        let value = Arc::new(());
        tx.send(value.clone()).unwrap();
        assert_eq!(
            Arc::strong_count(&value),
            1,
            "the value waiting for the receiver that failed went with it"
        );
        tx.send(value.clone()).unwrap();
        assert_eq!(
            attempts.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "the second send started one"
        );
        assert_eq!(Arc::strong_count(&value), 2, "queued for the started receiver");
    }

    #[test]
    fn a_queue_whose_started_receivers_are_gone_gives_values_back() {
        let tx = queue_started_on_demand(
            1,
            Box::new(|rx: Receiver<u32>| {
                drop(rx); // started, then gone at once (a thread that ended)
                Ok(())
            }),
        );
        tx.send(1).unwrap();
        assert_eq!(tx.send(2), Err(2), "no receiver left and none may be started");
    }

    #[test]
    fn a_sleeping_receiver_wakes_when_the_last_sender_goes() {
        let (tx, rx) = queue::<u32>();
        let tx2 = tx.clone();
        let receiver = std::thread::spawn(move || rx.recv());
        std::thread::sleep(Duration::from_millis(20));
        drop(tx);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!receiver.is_finished(), "one sender is left");
        drop(tx2);
        assert_eq!(receiver.join().unwrap(), None);
    }
}
