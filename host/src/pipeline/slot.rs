//! One stage's live instance within a pipeline instance, replaced after every trap.

use std::sync::Arc;

use super::bisect::Stage;
use crate::model::outcome::ItemError;
use crate::runtime::{RuntimeError, StageInstance, StageTemplate, Trapped};

/// One stage's live instance, replaced after every trap.
pub(crate) struct Slot {
    template: Arc<StageTemplate>,
    live: Option<StageInstance>,
    traps: u64,
    /// Whether a trapped instance is replaced at once (the default) or at the next call
    /// or [`Slot::repair`].
    replace_at_once: bool,
}

impl Slot {
    /// A slot holding a fresh instance of `template`.
    pub(crate) fn new(template: &Arc<StageTemplate>) -> Result<Slot, RuntimeError> {
        Ok(Slot {
            live: Some(template.instantiate()?),
            template: template.clone(),
            traps: 0,
            replace_at_once: true,
        })
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
            None => self.template.instantiate().map_err(|e| {
                ItemError::unavailable(format!(
                    "{} instance could not be re-created: {e}",
                    self.template.kind().name()
                ))
            })?,
        };
        Ok(self.live.insert(live))
    }

    /// Drops a trapped instance and builds its replacement right away, so the next call
    /// does not pay for it (unless told to leave that for later).
    fn replace(&mut self, trapped: &Trapped) {
        self.traps += 1;
        self.live = None;
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
