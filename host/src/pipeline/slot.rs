//! One stage's live instance within a pipeline instance, replaced after every trap, and
//! after a call that left its memory far larger than it started (linear memory never
//! shrinks: only a new instance gives the pages back).

use std::sync::Arc;

use super::bisect::Stage;
use crate::model::outcome::ItemError;
use crate::runtime::{RuntimeError, StageInstance, StageTemplate, Trapped};

/// How far past its start a stage instance's memory may grow before it is replaced after
/// its call (a Python instance starts at ~20 MiB, a Rust one at 1-2 MiB).
const SHED_GROWTH_BYTES: usize = 64 << 20;

/// One stage's live instance, replaced after every trap.
pub(crate) struct Slot {
    template: Arc<StageTemplate>,
    live: Option<StageInstance>,
    /// The live instance's linear memory when it was made.
    baseline: usize,
    traps: u64,
    /// Instances replaced to give back the memory a call grew.
    shed: u64,
    /// Whether a trapped instance is replaced at once (the default) or at the next call
    /// or [`Slot::repair`].
    replace_at_once: bool,
}

impl Slot {
    /// A slot holding a fresh instance of `template`.
    pub(crate) fn new(template: &Arc<StageTemplate>) -> Result<Slot, RuntimeError> {
        let live = template.instantiate()?;
        Ok(Slot {
            baseline: live.memory_bytes(),
            live: Some(live),
            template: template.clone(),
            traps: 0,
            shed: 0,
            replace_at_once: true,
        })
    }

    /// Replaces the live instance if its memory grew past [`SHED_GROWTH_BYTES`] more than
    /// it started with (and at least doubled), or grew and then ran into its cap (a
    /// language runtime's out-of-memory error, answered as the item's error, leaves a heap
    /// full to its cap): what one call needed is given back to the system instead of
    /// staying with the instance for its life.
    pub(crate) fn shed_growth(&mut self) {
        let Some(live) = &mut self.live else { return };
        let now = live.memory_bytes();
        let ran_into_cap = live.take_memory_refused() && now > self.baseline;
        let grew_far = now
            > self
                .baseline
                .saturating_add(SHED_GROWTH_BYTES)
                .max(self.baseline.saturating_mul(2));
        if !(grew_far || ran_into_cap) {
            return;
        }
        tracing::info!(
            stage = self.template.kind().name(),
            memory_mib = now >> 20,
            started_mib = self.baseline >> 20,
            cause = if grew_far {
                "grew far past its start"
            } else {
                "ran into memory_mib"
            },
            "instance replaced to give its grown memory back"
        );
        self.shed += 1;
        self.live = None;
        self.repair();
    }

    /// Whether a trapped instance is replaced at once, or left for the next call or
    /// [`Slot::repair`].
    pub(crate) fn replace_at_once(&mut self, at_once: bool) {
        self.replace_at_once = at_once;
    }

    /// Re-creates the live instance if a trap (or a failed replacement) left none.
    pub(crate) fn repair(&mut self) {
        if self.live.is_none() {
            if let Err(e) = self.instance() {
                tracing::error!(stage = self.template.kind().name(), "{}", e.message);
            }
        }
    }

    /// Traps seen so far.
    pub(crate) fn traps(&self) -> u64 {
        self.traps
    }

    /// How many instances were replaced to give back the memory a call grew.
    pub(crate) fn shed(&self) -> u64 {
        self.shed
    }

    /// Whether it holds a live instance (a failed replacement leaves a hole that the
    /// next call retries).
    pub(crate) fn is_live(&self) -> bool {
        self.live.is_some()
    }
}

impl Stage for Slot {
    type Instance = StageInstance;

    fn instance(&mut self) -> Result<&mut StageInstance, ItemError> {
        let live = match self.live.take() {
            Some(live) => live,
            None => {
                let fresh = self.template.instantiate().map_err(|e| {
                    ItemError::unavailable(format!(
                        "{} instance could not be re-created: {e}",
                        self.template.kind().name()
                    ))
                })?;
                self.baseline = fresh.memory_bytes();
                fresh
            }
        };
        Ok(self.live.insert(live))
    }

    /// Drops a trapped instance and builds its replacement right away, so the next call
    /// does not pay for it (unless told to leave that for later).
    fn replace(&mut self, trapped: &Trapped) {
        self.traps += 1;
        self.live = None;
        crate::traces::journal::replaced();
        tracing::warn!(
            stage = self.template.kind().name(),
            traps = self.traps,
            "plugin trapped: {}",
            trapped.message
        );
        if self.replace_at_once {
            self.repair();
        }
    }
}
