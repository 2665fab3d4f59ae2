//! `grpc.health.v1.Health` kept in step with the repository: the server (`""`, and the
//! inference service by its name) is `SERVING` when every model it should serve has
//! loaded, each model (by its name) when it is ready. The statuses are brought up to date
//! whenever the repository reports a change ([`Repository::changes`]).
//!
//! At shutdown every service turns `NOT_SERVING` and is then cleared, which ends every
//! `Watch` stream (after it has sent `NOT_SERVING`): an open `Watch` would otherwise
//! hold its connection, and so the graceful shutdown, until the grace period ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::SERVICE_NAME;
use crate::serving::Repository;

fn serving(yes: bool) -> ServingStatus {
    if yes {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

/// The health service's statuses, and what was last reported for each name.
#[derive(Clone)]
pub struct Health {
    reporter: HealthReporter,
    reported: Arc<Mutex<HashMap<String, ServingStatus>>>,
}

impl Health {
    pub fn new(reporter: HealthReporter) -> Self {
        Self {
            reporter,
            reported: Arc::default(),
        }
    }

    /// The names whose status differs from `now`, recorded as reported.
    fn changes(&self, now: HashMap<String, ServingStatus>) -> Vec<(String, ServingStatus)> {
        let mut reported = crate::sync::lock(&self.reported);
        let mut changes = Vec::new();
        for (name, status) in now {
            if reported.get(&name) != Some(&status) {
                reported.insert(name.clone(), status);
                changes.push((name, status));
            }
        }
        changes
    }

    /// Updates the statuses from `repository` at once and after each of its changes, until
    /// the repository is gone.
    pub async fn keep_in_step(self, repository: Arc<Repository>) {
        let mut changes = repository.changes();
        loop {
            changes.mark_unchanged();
            let draining = repository.is_draining();
            let mut now: HashMap<String, ServingStatus> = repository
                .index()
                .into_iter()
                .map(|(name, entry)| (name, serving(!draining && entry.status.serves())))
                .collect();
            // A model that has gone (its folder removed) is no longer served.
            let known = self.reported_names();
            for name in known {
                now.entry(name).or_insert(ServingStatus::NotServing);
            }
            let server = serving(repository.all_ready());
            now.insert(String::new(), server);
            now.insert(SERVICE_NAME.to_owned(), server);
            for (name, status) in self.changes(now) {
                self.reporter.set_service_status(&name, status).await;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Every name a status has been reported for.
    fn reported_names(&self) -> Vec<String> {
        crate::sync::lock(&self.reported).keys().cloned().collect()
    }

    /// Marks the server and every model `NOT_SERVING`, then ends every `Watch`.
    pub async fn stop(mut self, repository: &Repository) {
        let mut names = self.reported_names();
        names.extend(repository.index().into_iter().map(|(name, _)| name));
        names.extend([String::new(), SERVICE_NAME.to_owned()]);
        for name in &names {
            self.reporter.set_service_status(name, ServingStatus::NotServing).await;
        }
        for name in &names {
            self.reporter.clear_service_status(name).await;
        }
    }
}
