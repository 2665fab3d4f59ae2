//! Models made resident by their first request, and sent back to standby: one load per
//! model that every request arriving meanwhile waits for (each within its own deadline),
//! room made under the memory budget by evicting the least recently used models with
//! nothing in flight, and the idle unload.
//!
//! A model is in flight while anything besides the repository holds its `Arc<Model>`:
//! every request does from its lookup to its answer (its queued items included), so a
//! model whose count is one has nothing in flight or queued and can go. A request that
//! looks it up in the instant it is evicted still runs on the version it holds, which
//! goes away after its answer.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::loaders;
use super::model::Model;
use super::repository::{standby_of, Entry, ModelStatus, Repository, RepositoryError};
use super::residency::{
    EvictionCause, LoadProgress, LoadTimes, OnDemandLoad, Reservation, Standby, FOR_ROOM, IDLE, REQUEST,
};

/// How often a load waiting for room looks again (requests finishing free models without
/// a wake-up).
const ROOM_POLL: Duration = Duration::from_millis(20);

/// How often idle models and the budget are checked.
const ENFORCE_EVERY: Duration = Duration::from_millis(500);

impl Repository {
    /// The resident version of `name`, loading it first if it is on standby (the load
    /// every request for it meanwhile shares), within `deadline`; with the times of the
    /// load it waited for, if it did.
    pub async fn resident(
        self: &Arc<Self>,
        name: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(Arc<Model>, Option<LoadTimes>), RepositoryError> {
        let mut waited = None;
        loop {
            if self.loads_closed() {
                return Err(self.not_resident_yet(name, "the server is shutting down"));
            }
            match self.status(name) {
                Some(ModelStatus::Ready { model, .. }) => return Ok((model, waited)),
                Some(ModelStatus::Standby(_)) => {}
                // On demand a load under way (a reload, one from the API) is waited for like
                // one on a request: its model lock is taken after it, which finds it done.
                Some(ModelStatus::Loading) if self.policy.on_demand() => {}
                Some(ModelStatus::Failed { reason }) => {
                    return Err(RepositoryError::Broken {
                        name: name.to_owned(),
                        reason,
                    })
                }
                Some(ModelStatus::Loading) => return Err(self.not_resident_yet(name, "it is loading")),
                Some(ModelStatus::Unloaded) => return Err(RepositoryError::NotLoaded(name.to_owned())),
                None => return Err(RepositoryError::NoSuchFolder(name.to_owned())),
            }
            let mut load = self.load_on_demand(name);
            let finished = tokio::time::timeout_at(deadline, load.wait_for(|p| matches!(p, LoadProgress::Done(_))))
                .await
                .map(|done| done.map(|progress| *progress));
            match finished {
                Ok(Ok(progress)) => {
                    if let LoadProgress::Done(Some(times)) = progress {
                        waited = Some(times);
                    }
                }
                Ok(Err(_)) => return Err(self.not_resident_yet(name, "its load was abandoned")),
                Err(_) => {
                    let progress = *load.borrow();
                    let why = match progress {
                        LoadProgress::WaitingForRoom => self.room_report(),
                        LoadProgress::Queued => "it waits for another change of it to end".to_owned(),
                        LoadProgress::Loading | LoadProgress::Done(_) => "it is still loading".to_owned(),
                    };
                    return Err(self.not_resident_yet(name, &why));
                }
            }
        }
    }

    fn not_resident_yet(&self, name: &str, why: &str) -> RepositoryError {
        self.residency.unavailable.inc();
        RepositoryError::NotResidentYet {
            name: name.to_owned(),
            why: why.to_owned(),
        }
    }

    /// What the budget holds, for a request that waited for room in vain.
    fn room_report(&self) -> String {
        let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
        format!(
            "waiting for room under the memory budget of {:.0} MiB ({:.1} MiB held by resident models in use \
             or used within the last {} s)",
            mib(self.policy.budget_bytes.unwrap_or(u64::MAX)),
            mib(self.resident_bytes()),
            self.policy.min_residency.as_secs()
        )
    }

    /// The load of `name` under way, or a new one, off the request's task (a request
    /// that stops waiting does not stop it).
    fn load_on_demand(self: &Arc<Self>, name: &str) -> OnDemandLoad {
        let mut loads = crate::sync::lock(&self.on_demand);
        if let Some(load) = loads.get(name) {
            return load.clone();
        }
        let (progress, load) = watch::channel(LoadProgress::Queued);
        loads.insert(name.to_owned(), load.clone());
        drop(loads);
        let under_way = UnderWay {
            repository: self.clone(),
            name: name.to_owned(),
            progress,
        };
        tokio::spawn(async move {
            let times = under_way
                .repository
                .load_when_room(&under_way.name, &under_way.progress)
                .await;
            under_way.progress.send_replace(LoadProgress::Done(times));
        });
        load
    }

    /// Loads `name` if it is still on standby, once there is room for it; its times, if
    /// it loaded (or failed to).
    async fn load_when_room(&self, name: &str, progress: &watch::Sender<LoadProgress>) -> Option<LoadTimes> {
        let _this_model = self.lock_model(name).await;
        // Nothing new loads once the drain begins (its models are being let go).
        let Some(ModelStatus::Standby(standby)) = self.status(name).filter(|_| !self.loads_closed()) else {
            return None;
        };
        let dir = self.root().join(name);
        let sized = match self.policy.budget_bytes {
            None => None,
            Some(budget) => Some((budget, self.size_within(name, &standby, budget).await?)),
        };
        // Room is made once the load has its turn: loads queued behind the few that run
        // reserving room meanwhile kept a third of a budget empty (16 clients of Python
        // models, each queued load reserving what its model holds).
        let slot = self.load_slot().await;
        let reservation = match sized {
            None => None,
            Some((budget, expected)) => Some(self.make_room(name, expected, budget, progress).await?),
        };
        progress.send_replace(LoadProgress::Loading);
        let started = Instant::now();
        // A failure is logged and kept in the entry (until the folder changes).
        let _ = self.load_locked_in(name, dir, REQUEST, slot).await;
        let finished = Instant::now();
        drop(reservation);
        self.enforce_budget();
        Some(LoadTimes { started, finished })
    }

    /// What `standby` is expected to hold once loaded; `None`, with the model failed, if
    /// that is more than the whole `budget`.
    async fn size_within(&self, name: &str, standby: &Arc<Standby>, budget: u64) -> Option<u64> {
        let expected = {
            let _sizing = self.sizing_slots.acquire().await;
            let standby = standby.clone();
            let starting = self.policy.instance_floor(&standby.config.limits);
            // Reading the stage files' headers is part of the load's work: on a loader
            // thread, below the threads that serve warm models.
            loaders::run(move || standby.expected_bytes(starting))
                .await
                .unwrap_or(0)
        };
        if expected <= budget {
            return Some(expected);
        }
        let reason = format!(
            "it holds {} MiB (measured when it was last resident, or its files' size), more than the whole \
             memory budget of {} MiB (--memory-budget-mib)",
            expected >> 20,
            budget >> 20
        );
        tracing::error!(model = name, "model cannot be loaded: {reason}");
        self.update(name, |entry| {
            Entry::with_status(entry, ModelStatus::Failed { reason: reason.clone() })
        });
        None
    }

    /// Reserves `bytes` under `budget`, evicting the least recently used models for it
    /// and waiting while none can go; `None` once nobody waits for the load any more.
    async fn make_room(
        &self,
        name: &str,
        bytes: u64,
        budget: u64,
        progress: &watch::Sender<LoadProgress>,
    ) -> Option<Reservation<'_>> {
        let mut waiting = false;
        let _waiting = WaitingForRoom::new(&self.waiting_for_room);
        loop {
            // Registered before looking, so that a request ending (or a release) meanwhile
            // wakes it.
            let (freed, released) = (self.room.notified(), self.releases.done.notified());
            tokio::pin!(freed, released);
            freed.as_mut().enable();
            released.as_mut().enable();
            let held = || self.resident_bytes().saturating_add(self.releases.bytes());
            if let Some(reservation) = self.reservations.try_reserve(bytes, held, budget) {
                return Some(reservation);
            }
            if self.fits_once_released(bytes, budget) {
                let _ = tokio::time::timeout(ROOM_POLL, released).await;
                continue;
            }
            if self.evict_least_recent(FOR_ROOM, Some(name)) {
                continue;
            }
            if !waiting {
                waiting = true;
                self.residency.budget_waits.inc();
                progress.send_replace(LoadProgress::WaitingForRoom);
                tracing::warn!(model = name, "model load waits: {}", self.room_report());
            }
            // The register of loads under way holds one receiver; any other is a request.
            if progress.receiver_count() <= 1 {
                tracing::info!(model = name, "model load given up: no request waits for it any more");
                return None;
            }
            let _ = tokio::time::timeout(ROOM_POLL, freed).await;
        }
    }

    /// Whether `bytes` would fit once the evicted models' memory on its way out is given
    /// back: then the load waits for that rather than evicting more.
    fn fits_once_released(&self, bytes: u64, budget: u64) -> bool {
        self.releases.bytes() > 0 && self.committed_bytes().saturating_add(bytes) <= budget
    }

    /// What the resident models hold and the loads under way have reserved.
    fn committed_bytes(&self) -> u64 {
        self.resident_bytes().saturating_add(self.reservations.reserved())
    }

    /// Says a request let go of its model: a load waiting for room may evict it now
    /// (rather than at its next look, when another request may hold it again).
    pub fn request_ended(&self) {
        if self.waiting_for_room.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            self.room.notify_waiters();
        }
    }

    /// What the resident models hold together, measured.
    pub fn resident_bytes(&self) -> u64 {
        crate::sync::lock(&self.resident)
            .values()
            .filter_map(|slot| slot.entry.load().status.model().map(|m| m.held_bytes()))
            .sum()
    }

    /// How long after its last use `model` is kept from eviction for room: the minimum
    /// residency, or less for a model that loads fast — a reload costs it little, so
    /// `min_residency_loads` of its own load time (by default 4: a 5 ms Rust model 20 ms,
    /// a 25 ms Python one 100 ms). A model no request has found resident since its load is
    /// not kept at all (a one-off until it is asked for again): protecting the tail of
    /// Zipf traffic, 100 Python models whose working set passes the budget made nearly
    /// every load wait for room (docs/operations.md, "Many models").
    fn protection(&self, model: &Model) -> Duration {
        if !model.last_used.reused() {
            return Duration::ZERO;
        }
        self.policy
            .min_residency
            .min(model.load_took.saturating_mul(self.policy.min_residency_loads))
    }

    /// Sends the model that may go (not pinned, nothing in flight, past its protection;
    /// not `except`) and was least recently used back to standby, taking first the models
    /// no request has asked for again since their load (a segmented LRU: under Zipf
    /// traffic whose tail passes the budget, a one-off load at the tail then makes room
    /// by evicting another one-off, not a model in use that is asked for less often than
    /// the tail arrives); whether one went.
    fn evict_least_recent(&self, cause: EvictionCause, except: Option<&str>) -> bool {
        let min_idle = |model: &Model| self.protection(model);
        let mut candidates: Vec<(bool, Duration, String)> = self
            .resident_slots()
            .into_iter()
            .filter(|(name, _)| Some(name.as_str()) != except)
            .filter_map(|(name, slot)| {
                let entry = slot.entry.load();
                let model = evictable(&entry)?;
                let idle = model.last_used.ago();
                (idle >= min_idle(model)).then_some((model.last_used.reused(), idle, name))
            })
            .collect();
        candidates.sort_unstable_by_key(|(reused, idle, _)| (*reused, std::cmp::Reverse(*idle)));
        candidates
            .into_iter()
            .any(|(_, _, name)| self.evict(&name, cause, &min_idle))
    }

    /// Sends `name` back to standby if it still may go and has been idle `min_idle` of
    /// it; whether it went.
    fn evict(&self, name: &str, cause: EvictionCause, min_idle: &dyn Fn(&Model) -> Duration) -> bool {
        // A model being (re)loaded, unloaded or indexed is left alone.
        let Some(_this_model) = self.try_lock_model(name) else {
            return false;
        };
        let Some(entry) = self.entry(name) else {
            return false;
        };
        let Some(model) = evictable(&entry) else {
            return false;
        };
        let idle = model.last_used.ago();
        if idle < min_idle(model) {
            return false;
        }
        let standby = Arc::new(standby_of(model));
        let held = model.held_bytes();
        self.update(name, |entry| {
            Entry::with_status(entry, ModelStatus::Standby(standby.clone()))
        });
        self.residency.evictions.get_or_create(&cause).inc();
        self.room.notify_waiters();
        tracing::info!(
            model = name,
            cause = cause.cause,
            held_mib = held >> 20,
            idle_ms = idle.as_millis() as u64,
            "model evicted: on standby"
        );
        // Usually the last hold on the model; its memory counts until it is dropped.
        loaders::drop_off_serving_threads(self.releases.start(entry, held));
        true
    }

    /// Evicts the least recently used models while the resident ones hold more than the
    /// budget (a model grew, or a first load measured more than it reserved).
    fn enforce_budget(&self) {
        let Some(budget) = self.policy.budget_bytes else {
            return;
        };
        while self.committed_bytes() > budget {
            if !self.evict_least_recent(FOR_ROOM, None) {
                break;
            }
        }
    }

    /// Sends models idle past the idle time back to standby.
    fn unload_idle(&self) {
        let Some(idle_unload) = self.policy.idle_unload else {
            return;
        };
        let idle: Vec<String> = self
            .resident_slots()
            .into_iter()
            .filter(|(_, slot)| evictable(&slot.entry.load()).is_some_and(|m| m.last_used.ago() >= idle_unload))
            .map(|(name, _)| name)
            .collect();
        for name in idle {
            self.evict(&name, IDLE, &|_| idle_unload);
        }
    }

    /// Whether `bytes` more (another instance of `name`) fit under the budget beside what
    /// is resident and reserved, evicting the least recently used idle models for them
    /// if need be; never waits (an instance is wanted, not needed: the model's requests
    /// are served by the instances it has meanwhile).
    fn room_for_instance(&self, name: &str, bytes: u64) -> bool {
        let Some(budget) = self.policy.budget_bytes else {
            return true;
        };
        loop {
            if self
                .committed_bytes()
                .saturating_add(self.releases.bytes())
                .saturating_add(bytes)
                <= budget
            {
                return true;
            }
            if self.fits_once_released(bytes, budget) || !self.evict_least_recent(FOR_ROOM, Some(name)) {
                tracing::debug!(model = name, "no room for another instance: {}", self.room_report());
                return false;
            }
        }
    }

    /// What a version of `name` asks before it adds an instance, if there is a budget.
    pub(super) fn room_for_instances(&self, name: &str) -> Option<super::pool::Room> {
        self.policy.budget_bytes?;
        let repository = self.itself.get()?.clone();
        let name = name.to_owned();
        Some(Arc::new(move |bytes| {
            repository
                .upgrade()
                .is_some_and(|repository| repository.room_for_instance(&name, bytes))
        }))
    }

    /// Lets instances idle past their idle time go, down to each model's floor.
    fn shrink_idle_instances(&self) {
        for (_, slot) in self.resident_slots() {
            if let Some(model) = slot.entry.load().status.model() {
                model.shrink_idle_instances();
            }
        }
    }

    /// Starts keeping the budget, the idle time and the instance counts: a task that
    /// checks twice a second, until the repository drains or goes.
    pub fn keep_residency(self: &Arc<Self>) {
        let _ = self.itself.set(Arc::downgrade(self));
        let repository: Weak<Repository> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(ENFORCE_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(repository) = repository.upgrade() else { return };
                if repository.loads_closed() {
                    return;
                }
                repository.unload_idle();
                repository.enforce_budget();
                repository.shrink_idle_instances();
            }
        });
    }
}

/// The resident model of `entry` if it may be evicted: not pinned, and nothing but the
/// entry holds it (nothing in flight or queued).
fn evictable(entry: &Entry) -> Option<&Arc<Model>> {
    let model = entry.status.model()?;
    (!entry.pinned() && Arc::strong_count(model) == 1).then_some(model)
}

/// A load waiting for room, counted while it waits.
struct WaitingForRoom<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> WaitingForRoom<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for WaitingForRoom<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A load in the register of loads under way, taken out of it when the load ends, even
/// by a panic.
struct UnderWay {
    repository: Arc<Repository>,
    name: String,
    progress: watch::Sender<LoadProgress>,
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        crate::sync::lock(&self.repository.on_demand).remove(&self.name);
        // Waiters still waiting (a panic ended the load) hear of it.
        self.progress.send_if_modified(|progress| {
            let over = matches!(progress, LoadProgress::Done(_));
            if !over {
                *progress = LoadProgress::Done(None);
            }
            !over
        });
    }
}
