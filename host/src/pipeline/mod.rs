//! One model instance's pipeline: preprocess → predict → postprocess over a batch of
//! items, with every item ending in its own outcome.
//!
//! What this module guarantees, whatever a plugin does:
//! - **Per-item outcomes.** A plugin's item errors stay with their items; items that fail
//!   a stage skip the later ones.
//! - **Trap isolation by bisection.** When a call traps (panic, out of memory, stack
//!   overflow, time limit) or breaks the plugin contract, the instance is replaced and
//!   the call's items are split in halves and re-run, recursively, until each culprit is
//!   alone. Culprits get 500 (504 for a time limit); everyone else gets the answer they
//!   would have got alone. For a call of `n` items of which `k` are culprits, this costs
//!   at most `2·k·⌈log2 n⌉` extra calls, and nothing when no call fails. A time limit
//!   is the exception: halving would pay a full deadline per level, so the items are
//!   re-run one by one instead (`n` short calls, plus one more deadline per slow item).
//! - **Whole-call errors are isolated too.** When predict fails a whole call of several
//!   items with a 5xx (an uncaught exception becomes one) or on items of several
//!   requests, the items are bisected as after a trap, keeping the instance; only a 4xx
//!   refusal of a call holding one request's items is given to all of them.
//! - **Contract checks.** Result counts, batch sizes, output names, datatypes and shapes,
//!   and failure indices are all checked; violations are answered as 500 naming the
//!   stage and the violation.
//!
//! Items whose per-item shapes differ are sent to predict in separate sub-batches, but for
//! the model's ragged tensors (`[batching.pad]`): those are padded to their sub-batch's
//! largest, the items split into length buckets so that padding stays within the bound.
//!
//! Layout: `load` (a model folder to runnable instances), `bisect` (the algorithm, over any [`bisect::Stage`]), `slot` (a stage's live
//! instance), `predict` (sub-batches, stacking, splitting), `contract` (the checks).

mod bisect;
mod contract;
mod load;
mod predict;
mod slot;

pub use bisect::{Audience, Everyone};
pub use load::{LoadError, LoadedModel};

use std::sync::Arc;
use std::time::{Duration, Instant};

use bisect::{run_bisected, Deferred, Indexed};
use contract::map_items;
use predict::run_predict;
pub use predict::PaddingCount;
use slot::Slot;

use crate::model::config::TensorSpec;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::padding::Padding;
use crate::model::tensor::Item;
use crate::model::StageKind;
use crate::runtime::{RuntimeError, StageInstance, StageTemplate};

/// The compiled stages of one model version; instances are made from it.
pub struct PipelineTemplate {
    pub preprocess: Option<Arc<StageTemplate>>,
    pub predict: Arc<StageTemplate>,
    pub postprocess: Option<Arc<StageTemplate>>,
    /// The declared outputs every final item is checked against.
    pub outputs: Vec<TensorSpec>,
    /// Predict's ragged inputs, padded per sub-batch.
    pub padding: Padding,
}

impl PipelineTemplate {
    /// A live instance of every stage, initialised.
    pub fn instantiate(self: &Arc<Self>) -> Result<PipelineInstance, RuntimeError> {
        let slot = Slot::new;
        Ok(PipelineInstance {
            preprocess: self.preprocess.as_ref().map(slot).transpose()?,
            predict: slot(&self.predict)?,
            postprocess: self.postprocess.as_ref().map(slot).transpose()?,
            template: self.clone(),
            last_run: Vec::new(),
            last_padding: PaddingCount::default(),
        })
    }
}

/// A full set of live stage instances; runs batches one at a time.
pub struct PipelineInstance {
    template: Arc<PipelineTemplate>,
    preprocess: Option<Slot>,
    predict: Slot,
    postprocess: Option<Slot>,
    /// How long each stage took in the last run (replacements and bisection included).
    last_run: Vec<(StageKind, Duration)>,
    /// What the last run's predict calls held of ragged tensors.
    last_padding: PaddingCount,
}

impl PipelineInstance {
    /// The time each stage that ran took in the last [`Self::run`].
    pub fn stage_times(&self) -> &[(StageKind, Duration)] {
        &self.last_run
    }

    /// What the predict calls of the last [`Self::run`] held of ragged tensors.
    pub fn padding(&self) -> PaddingCount {
        self.last_padding
    }

    /// Traps seen by this instance's stages so far.
    pub fn traps(&self) -> u64 {
        self.each_slot().map(Slot::traps).sum()
    }

    /// Instances replaced to give back memory a call grew, over every stage.
    pub fn shed(&self) -> u64 {
        self.each_slot().map(Slot::shed).sum()
    }

    /// A brand-new set of instances from the same template.
    pub fn fresh(&self) -> Result<PipelineInstance, RuntimeError> {
        self.template.instantiate()
    }

    /// Whether every stage has a live instance (a failed replacement leaves a hole that
    /// the next call retries).
    pub fn is_whole(&self) -> bool {
        let live = |slot: &Option<Slot>| slot.as_ref().is_none_or(Slot::is_live);
        live(&self.preprocess) && self.predict.is_live() && live(&self.postprocess)
    }

    /// Every stage's slot.
    fn each_slot(&self) -> impl Iterator<Item = &Slot> {
        self.preprocess
            .iter()
            .chain(std::iter::once(&self.predict))
            .chain(self.postprocess.iter())
    }

    fn slots(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.preprocess
            .iter_mut()
            .chain(std::iter::once(&mut self.predict))
            .chain(self.postprocess.iter_mut())
    }

    /// Whether a trapped stage instance is replaced at once (the default: the next call
    /// does not pay for it), or left for the next call or [`Self::repair`] — for a caller
    /// whose answer must not wait for a replacement's `init`.
    pub fn replace_at_once(&mut self, at_once: bool) {
        self.slots().for_each(|slot| slot.replace_at_once(at_once));
    }

    /// Re-creates every stage instance a trap left out.
    pub fn repair(&mut self) {
        self.slots().for_each(Slot::repair);
    }

    /// Runs `items` through every stage; one outcome per item, in order. For callers whose
    /// audience never has fresh work waiting (nothing is handed back; see [`Self::run_from`]).
    pub fn run(&mut self, items: Vec<Item>, audience: &dyn Audience) -> Vec<ItemOutcome> {
        let run = self.run_from(StageKind::Preprocess, items, audience);
        run.outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(ItemError::unavailable("not run: handed back to a queue"))))
            .collect()
    }

    /// Runs `items` through every stage from `start` on (a part handed back earlier
    /// resumes at the stage it was in); one outcome per item, in order, but for the parts
    /// that gave way to fresh work (see [`Run`]). `audience` tells which items are still
    /// wanted (checked before every call), which request each belongs to and whether
    /// fresh work waits.
    pub fn run_from(&mut self, start: StageKind, items: Vec<Item>, audience: &dyn Audience) -> Run {
        self.last_run.clear();
        self.last_padding = PaddingCount::default();
        let mut outcomes: Vec<Option<ItemOutcome>> = vec![None; items.len()];
        let mut alive: Vec<Indexed> = items.into_iter().enumerate().collect();
        let mut handed_back = Vec::new();
        let mut deferred = Deferred::new();
        let mut hand_back = |stage: StageKind, deferred: &mut Deferred| {
            handed_back.extend(deferred.drain(..).map(|items| Resume { stage, items }));
        };

        // The last stage's answers are checked against the declared outputs inside its
        // call, so that a violation is bisected down to the items that cause it.
        let declared = self.template.outputs.as_slice();
        let last_is_predict = self.postprocess.is_none();
        let times = &mut self.last_run;
        if let (Some(slot), StageKind::Preprocess) = (self.preprocess.as_mut(), start) {
            let started = Instant::now();
            let call = |instance: &mut StageInstance, items: &mut [Indexed]| map_items(instance, items, &[]);
            alive = settle(&mut outcomes, run_bisected(slot, alive, audience, &call, &mut deferred));
            hand_back(StageKind::Preprocess, &mut deferred);
            times.push((StageKind::Preprocess, started.elapsed()));
        }
        let predict_declared = if last_is_predict { declared } else { &[] };
        if !alive.is_empty() && start != StageKind::Postprocess {
            let started = Instant::now();
            let (predicted, padding) = run_predict(
                &mut self.predict,
                alive,
                audience,
                (predict_declared, &self.template.padding),
                &mut deferred,
            );
            self.last_padding = padding;
            alive = settle(&mut outcomes, predicted);
            hand_back(StageKind::Predict, &mut deferred);
            times.push((StageKind::Predict, started.elapsed()));
        }
        if let (Some(slot), false) = (self.postprocess.as_mut(), alive.is_empty()) {
            let started = Instant::now();
            let call = |instance: &mut StageInstance, items: &mut [Indexed]| map_items(instance, items, declared);
            alive = settle(&mut outcomes, run_bisected(slot, alive, audience, &call, &mut deferred));
            hand_back(StageKind::Postprocess, &mut deferred);
            times.push((StageKind::Postprocess, started.elapsed()));
        }
        for (index, item) in alive {
            outcomes[index] = Some(Ok(item));
        }
        let resumes_later: Vec<usize> = handed_back
            .iter()
            .flat_map(|r| r.items.iter().map(|(i, _)| *i))
            .collect();
        let mut outcomes: Vec<Option<ItemOutcome>> = outcomes
            .into_iter()
            .map(|o| Some(o.unwrap_or_else(|| Err(ItemError::trap("item lost in the pipeline")))))
            .collect();
        for index in resumes_later {
            outcomes[index] = None;
        }
        self.slots().for_each(Slot::shed_growth);
        Run { outcomes, handed_back }
    }
}

/// What [`PipelineInstance::run_from`] did with each item.
pub struct Run {
    /// Per item, in order: its outcome, or `None` for an item handed back.
    pub outcomes: Vec<Option<ItemOutcome>>,
    /// Parts that gave way to fresh work, each to be run again later as one call from
    /// its stage on (`PipelineInstance::run_from` with that stage as `start`).
    pub handed_back: Vec<Resume>,
}

/// A part of a run handed back: items (by their index in the run) and the stage they are in.
pub struct Resume {
    pub stage: StageKind,
    pub items: Vec<(usize, Item)>,
}

/// Records failed items' outcomes and returns the survivors for the next stage.
fn settle(outcomes: &mut [Option<ItemOutcome>], results: Vec<(usize, ItemOutcome)>) -> Vec<Indexed> {
    let mut alive = Vec::with_capacity(results.len());
    for (index, result) in results {
        match result {
            Ok(item) => alive.push((index, item)),
            Err(e) => outcomes[index] = Some(Err(e)),
        }
    }
    alive
}
