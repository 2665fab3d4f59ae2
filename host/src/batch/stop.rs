//! The job's stop request (Ctrl-C, SIGTERM), shared by every stage, each of which
//! notices it at its next step.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A request to stop: no new lines, no more retries; what is in flight finishes.
#[derive(Default)]
pub(crate) struct Stop {
    requested: AtomicBool,
    notify: Notify,
}

impl Stop {
    pub(crate) fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub(crate) fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Resolves once a stop is requested.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.requested() {
                return;
            }
            notified.await;
        }
    }
}
