//! The hand-off from a model's batcher to its instance threads: a queue with many senders
//! and many receivers where an idle receiver goes to sleep at once and a send wakes one
//! only when one sleeps.
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

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    queue: VecDeque<T>,
    senders: usize,
    receivers: usize,
    /// Receivers asleep in [`Receiver::recv`].
    sleeping: usize,
}

/// A new queue, open while both sides have a handle.
pub fn queue<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            senders: 1,
            receivers: 1,
            sleeping: 0,
        }),
        ready: Condvar::new(),
    });
    (Sender(shared.clone()), Receiver(shared))
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        crate::sync::lock(&self.state)
    }
}

impl<T> Sender<T> {
    /// Queues `value` for one receiver; gives it back when every receiver is gone.
    pub fn send(&self, value: T) -> Result<(), T> {
        let mut state = self.0.lock();
        if state.receivers == 0 {
            return Err(value);
        }
        state.queue.push_back(value);
        let wake = state.sleeping > 0;
        drop(state);
        if wake {
            self.0.ready.notify_one();
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
