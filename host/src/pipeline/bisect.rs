//! Trap isolation by bisection, over any [`Stage`].
//!
//! When a call traps or breaks the plugin contract, its items are split in halves and
//! re-run, recursively, until each culprit is alone: for `n` items of which `k` are
//! culprits that costs at most `2·k·⌈log2 n⌉` extra calls, and nothing when no call
//! fails. A time limit is the exception: halving would pay a full deadline per level, so
//! the items are re-run one by one (`n` short calls, plus one more deadline per slow
//! item).
//!
//! Two more rules keep one client's items from costing or failing another's:
//! - before every call (the first, each half, each one-by-one re-run) items nobody waits
//!   for any more — their client left, or their request's deadline passed — are dropped
//!   and answered 504 without a plugin call;
//! - a batch-level error (predict failing the whole call) is bisected like a trap, but for
//!   the instance, which is kept (the plugin answered; its store is sound), unless it is a
//!   deliberate refusal of one request: a 4xx whole-call error of a call whose items all
//!   belong to one request is given to every item. A 5xx one is what an uncaught exception
//!   becomes (JavaScript's `throw` in predict is `err(item-error)`), so it is isolated
//!   whatever the requests: the items that succeed alone get their answers and each
//!   culprit gets the error of its own call. A call mixing requests is split on any
//!   whole-call error, so the error lands on the items that cause it. The bound is the
//!   trap's: at most `2·k·⌈log2 n⌉` extra calls for `k` culprits among `n` items; a
//!   plugin that fails every call pays `2·n − 2` extra calls before every item fails.
//!
//! When the audience takes them ([`Audience::takes_reruns`]; the server's does), the
//! parts to re-run after a failed call are handed back ([`Deferred`]) instead of being run
//! here: the batcher runs each later as a call of its own, from the stage it was in, taking
//! turns with fresh batches (`serving::batcher`). So one request's slow or trapping items
//! cost another client about one deadline at most, however many of them it holds, and
//! each part's items are answered as soon as that part is done — a neighbour caught in a
//! call with another request's slow items does not wait for all their re-runs.
//!
//! The algorithm only needs a stage that hands out a live instance and replaces it after
//! a trap, and an [`Audience`] that knows the items' clients, so it is tested here with
//! fakes of both.

use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::Item;
use crate::runtime::Trapped;

/// What bisection needs of a stage.
pub(crate) trait Stage {
    /// What a call runs on.
    type Instance;
    /// The live instance, re-created if a trap left none (an error answers every item
    /// of the call).
    fn instance(&mut self) -> Result<&mut Self::Instance, ItemError>;
    /// Drops a trapped instance (it is never entered again) and replaces it.
    fn replace(&mut self, trapped: &Trapped);
}

/// What the pipeline may ask about the clients of the items it runs, by item index.
pub trait Audience {
    /// Whether the item is still worth running: its client waits and its request's
    /// deadline has not passed.
    fn wanted(&self, index: usize) -> bool;
    /// The request the item belongs to; items of one request share it.
    fn request(&self, index: usize) -> u64;
    /// Whether re-runs are handed back to be run later, each as a call of its own, rather
    /// than run here, one after the other.
    fn takes_reruns(&self) -> bool {
        false
    }
}

/// Every item is wanted and is its own request.
pub struct Everyone;

impl Audience for Everyone {
    fn wanted(&self, _: usize) -> bool {
        true
    }

    fn request(&self, index: usize) -> u64 {
        index as u64
    }
}

/// An item with its position in the batch the pipeline was given.
pub(crate) type Indexed = (usize, Item);

/// Parts of a failed call to re-run, handed back; each is re-run later as one call of the
/// same stage.
pub(crate) type Deferred = Vec<Vec<Indexed>>;

/// What one failed call means for the items in it.
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// Replace the instance and bisect.
    Trapped(Trapped),
    /// The plugin answered, but broke the contract: bisect without replacing.
    Violation(String),
    /// Predict failed the whole call: every item gets this answer when it is one request's
    /// 4xx, otherwise the items are bisected without replacing the instance.
    All(ItemError),
}

/// One call of a stage on some items, checked against the plugin contract.
///
/// The items are lent: the call may take them out of their slots while it runs, but
/// puts them back, so that they can be re-run should it fail.
pub(crate) type StageCall<'a, I> = dyn Fn(&mut I, &mut [Indexed]) -> Result<Vec<ItemOutcome>, CallFailure> + 'a;

/// Calls a stage on `items`; on a trap or contract violation, replaces the instance if
/// needed and re-runs the parts, until the failing items are isolated. One outcome per
/// item, with its index, but for the items of parts put in `deferred` (when the audience
/// takes re-runs, see the module's doc).
pub(crate) fn run_bisected<S: Stage>(
    stage: &mut S,
    items: Vec<Indexed>,
    audience: &dyn Audience,
    call: &StageCall<'_, S::Instance>,
    deferred: &mut Deferred,
) -> Vec<(usize, ItemOutcome)> {
    let (items, mut answered) = drop_unwanted(items, audience);
    answered.extend(run_wanted(stage, items, audience, call, deferred));
    answered
}

/// Splits off the items nobody waits for, answered without a call.
fn drop_unwanted(items: Vec<Indexed>, audience: &dyn Audience) -> (Vec<Indexed>, Vec<(usize, ItemOutcome)>) {
    let (wanted, unwanted): (Vec<Indexed>, Vec<Indexed>) = items.into_iter().partition(|(i, _)| audience.wanted(*i));
    if unwanted.is_empty() {
        return (wanted, Vec::new());
    }
    let abandoned = ItemError::deadline("not run: the client left or the request's deadline passed");
    (wanted, answer_all(unwanted, &abandoned))
}

fn run_wanted<S: Stage>(
    stage: &mut S,
    mut items: Vec<Indexed>,
    audience: &dyn Audience,
    call: &StageCall<'_, S::Instance>,
    deferred: &mut Deferred,
) -> Vec<(usize, ItemOutcome)> {
    if items.is_empty() {
        return Vec::new();
    }
    let instance = match stage.instance() {
        Ok(instance) => instance,
        Err(e) => return answer_all(items, &e),
    };
    let failure = match call(instance, &mut items) {
        Ok(results) => return items.into_iter().map(|(i, _)| i).zip(results).collect(),
        Err(failure) => failure,
    };
    let mut deadline = false;
    let one_request = items
        .iter()
        .all(|(i, _)| audience.request(*i) == audience.request(items[0].0));
    let error = match failure {
        CallFailure::All(error) if items.len() == 1 || (one_request && is_refusal(&error)) => {
            return answer_all(items, &error)
        }
        // An exception, or another request's item may be the cause: find it before failing
        // anyone.
        CallFailure::All(error) => error,
        CallFailure::Trapped(trapped) => {
            stage.replace(&trapped);
            deadline = trapped.deadline;
            trapped.item_error()
        }
        CallFailure::Violation(message) => ItemError::trap(message),
    };
    if items.len() == 1 {
        return answer_all(items, &error);
    }
    // A time limit costs a full deadline per failed call, so halving would cost one per
    // level; running each item alone costs only one more (per slow item).
    let parts: Vec<Vec<Indexed>> = if deadline {
        items.into_iter().map(|item| vec![item]).collect()
    } else {
        let mut first = items;
        let second = first.split_off(first.len() / 2);
        vec![first, second]
    };
    if audience.takes_reruns() {
        deferred.extend(parts);
        return Vec::new();
    }
    parts
        .into_iter()
        .flat_map(|part| run_bisected(stage, part, audience, call, deferred))
        .collect()
}

/// Whether a whole-call error is the plugin's deliberate verdict on its input (4xx), which
/// bisecting would only repeat, rather than its own failure (5xx: an exception, a bug).
fn is_refusal(error: &ItemError) -> bool {
    error.status < 500
}

fn answer_all(items: Vec<Indexed>, error: &ItemError) -> Vec<(usize, ItemOutcome)> {
    items.into_iter().map(|(i, _)| (i, Err(error.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashSet;

    use super::*;
    use crate::model::tensor::{DataType, Tensor};

    /// A stage whose instance is a number that grows with each replacement.
    #[derive(Default)]
    struct FakeStage {
        instance: u32,
        replacements: u32,
        unavailable: bool,
    }

    impl Stage for FakeStage {
        type Instance = u32;

        fn instance(&mut self) -> Result<&mut u32, ItemError> {
            if self.unavailable {
                return Err(ItemError::unavailable("cannot re-create"));
            }
            Ok(&mut self.instance)
        }

        fn replace(&mut self, _: &Trapped) {
            self.replacements += 1;
            self.instance += 1;
        }
    }

    /// An item that carries its own index as data, so answers can be traced back.
    fn item(index: usize) -> Indexed {
        let tensor = Tensor {
            name: "x".into(),
            datatype: DataType::Uint32,
            shape: vec![1],
            data: (index as u32).to_le_bytes().to_vec(),
        };
        (index, vec![tensor])
    }

    fn items(n: usize) -> Vec<Indexed> {
        (0..n).map(item).collect()
    }

    fn marker(item: &Item) -> usize {
        u32::from_le_bytes(item[0].data[..4].try_into().unwrap()) as usize
    }

    /// A call that fails as `failure` says whenever a culprit is among its items, and
    /// otherwise echoes each item; counts its calls.
    fn call_failing_on<'a>(
        culprits: &'a HashSet<usize>,
        calls: &'a Cell<usize>,
        failure: fn() -> CallFailure,
    ) -> impl Fn(&mut u32, &mut [Indexed]) -> Result<Vec<ItemOutcome>, CallFailure> + 'a {
        move |_, items| {
            calls.set(calls.get() + 1);
            if items.iter().any(|(_, item)| culprits.contains(&marker(item))) {
                return Err(failure());
            }
            Ok(items.iter().map(|(_, item)| Ok(item.clone())).collect())
        }
    }

    fn trap() -> CallFailure {
        CallFailure::Trapped(Trapped {
            message: "unreachable".into(),
            deadline: false,
        })
    }

    fn timeout() -> CallFailure {
        CallFailure::Trapped(Trapped {
            message: "time limit".into(),
            deadline: true,
        })
    }

    fn violation() -> CallFailure {
        CallFailure::Violation("returned 3 results for 4 items".into())
    }

    /// Every item ends with exactly one outcome: culprits `status`, the rest their echo.
    fn check_outcomes(outcomes: &[(usize, ItemOutcome)], n: usize, culprits: &HashSet<usize>, status: u16) {
        let mut seen: Vec<usize> = outcomes.iter().map(|(i, _)| *i).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "one outcome per item");
        for (index, outcome) in outcomes {
            match outcome {
                Ok(item) => {
                    assert!(!culprits.contains(index), "culprit {index} succeeded");
                    assert_eq!(marker(item), *index, "item {index} got another item's answer");
                }
                Err(error) => {
                    assert!(
                        culprits.contains(index),
                        "innocent item {index} failed: {}",
                        error.message
                    );
                    assert_eq!(error.status, status);
                }
            }
        }
    }

    /// [`run_bisected`] where nothing gives way (nothing may be deferred).
    fn run_all<S: Stage>(
        stage: &mut S,
        items: Vec<Indexed>,
        audience: &dyn Audience,
        call: &StageCall<'_, S::Instance>,
    ) -> Vec<(usize, ItemOutcome)> {
        let mut deferred = Deferred::new();
        let outcomes = run_bisected(stage, items, audience, call, &mut deferred);
        assert!(deferred.is_empty(), "nothing waits, so nothing gives way");
        outcomes
    }

    fn ceil_log2(n: usize) -> usize {
        n.next_power_of_two().trailing_zeros() as usize
    }

    #[test]
    fn a_call_without_failures_costs_one_call() {
        let (culprits, calls) = (HashSet::new(), Cell::new(0));
        let mut stage = FakeStage::default();
        let outcomes = run_all(
            &mut stage,
            items(32),
            &Everyone,
            &call_failing_on(&culprits, &calls, trap),
        );
        check_outcomes(&outcomes, 32, &culprits, 500);
        assert_eq!(calls.get(), 1);
        assert_eq!(stage.replacements, 0);
    }

    #[test]
    fn traps_are_isolated_within_the_extra_call_bound() {
        for n in [2, 3, 7, 16, 33, 64] {
            for culprits in [
                vec![0],
                vec![n - 1],
                vec![0, n / 2],
                vec![1, n / 2, n - 1],
                (0..n).step_by(3).collect(),
            ] {
                let culprits: HashSet<usize> = culprits.into_iter().collect();
                let calls = Cell::new(0);
                let mut stage = FakeStage::default();
                let outcomes = run_all(
                    &mut stage,
                    items(n),
                    &Everyone,
                    &call_failing_on(&culprits, &calls, trap),
                );
                check_outcomes(&outcomes, n, &culprits, 500);
                let k = culprits.len();
                let extra = calls.get() - 1;
                assert!(
                    extra <= 2 * k * ceil_log2(n),
                    "n={n}, k={k}: {extra} extra calls, bound {}",
                    2 * k * ceil_log2(n)
                );
                // Every failed call replaced the instance: it is never entered again.
                assert!(stage.replacements as usize >= k);
            }
        }
    }

    #[test]
    fn time_limits_rerun_items_one_by_one() {
        let culprits: HashSet<usize> = [3, 11].into_iter().collect();
        let calls = Cell::new(0);
        let mut stage = FakeStage::default();
        let outcomes = run_all(
            &mut stage,
            items(16),
            &Everyone,
            &call_failing_on(&culprits, &calls, timeout),
        );
        check_outcomes(&outcomes, 16, &culprits, 504);
        // One batch call, then each item alone: one more deadline per slow item only.
        assert_eq!(calls.get(), 1 + 16);
        assert_eq!(stage.replacements, 1 + 2);
    }

    #[test]
    fn contract_violations_bisect_without_replacing_the_instance() {
        let culprits: HashSet<usize> = [5].into_iter().collect();
        let calls = Cell::new(0);
        let mut stage = FakeStage::default();
        let outcomes = run_all(
            &mut stage,
            items(8),
            &Everyone,
            &call_failing_on(&culprits, &calls, violation),
        );
        check_outcomes(&outcomes, 8, &culprits, 500);
        assert_eq!(stage.replacements, 0);
        assert!(calls.get() - 1 <= 2 * ceil_log2(8));
        let (_, culprit) = outcomes.iter().find(|(i, _)| *i == 5).unwrap();
        assert!(culprit.as_ref().unwrap_err().message.contains("returned 3 results"));
    }

    /// Items grouped into requests of `per_request` consecutive items; the odd ones are
    /// unwanted when `drop_odd`.
    struct Requests {
        per_request: usize,
        drop_odd: bool,
        asked: Cell<usize>,
    }

    impl Audience for Requests {
        fn wanted(&self, index: usize) -> bool {
            self.asked.set(self.asked.get() + 1);
            !(self.drop_odd && index % 2 == 1)
        }

        fn request(&self, index: usize) -> u64 {
            (index / self.per_request) as u64
        }
    }

    fn requests(per_request: usize) -> Requests {
        Requests {
            per_request,
            drop_odd: false,
            asked: Cell::new(0),
        }
    }

    fn whole_batch_error() -> CallFailure {
        CallFailure::All(ItemError::new(422, "whole batch"))
    }

    #[test]
    fn a_whole_call_error_of_one_request_answers_its_items_without_bisecting() {
        let culprits: HashSet<usize> = [0].into_iter().collect();
        let calls = Cell::new(0);
        let mut stage = FakeStage::default();
        let one_request = requests(4);
        let failing = call_failing_on(&culprits, &calls, whole_batch_error);
        let outcomes = run_all(&mut stage, items(4), &one_request, &failing);
        assert_eq!(calls.get(), 1);
        assert!(outcomes.iter().all(|(_, o)| o.as_ref().unwrap_err().status == 422));
    }

    #[test]
    fn a_whole_call_error_never_fails_another_requests_items() {
        // Eight requests of four items; request 5 holds the culprit.
        let culprits: HashSet<usize> = [21].into_iter().collect();
        let calls = Cell::new(0);
        let mut stage = FakeStage::default();
        let audience = requests(4);
        let failing = call_failing_on(&culprits, &calls, whole_batch_error);
        let outcomes = run_all(&mut stage, items(32), &audience, &failing);
        let failed: HashSet<usize> = (20..24).collect();
        check_outcomes(&outcomes, 32, &failed, 422);
        assert_eq!(stage.replacements, 0, "a plugin's error is no trap");
        assert!(calls.get() - 1 <= 2 * ceil_log2(32), "{} extra calls", calls.get() - 1);
    }

    fn exception() -> CallFailure {
        CallFailure::All(ItemError::new(500, "uncaught exception"))
    }

    #[test]
    fn a_5xx_whole_call_error_is_isolated_within_one_request_at_the_traps_cost() {
        for (n, culprits) in [(32, vec![13]), (7, vec![0, 6]), (16, vec![3, 4, 5])] {
            let culprits: HashSet<usize> = culprits.into_iter().collect();
            let calls_for = |failure: fn() -> CallFailure| {
                let calls = Cell::new(0);
                let mut stage = FakeStage::default();
                let failing = call_failing_on(&culprits, &calls, failure);
                let outcomes = run_all(&mut stage, items(n), &requests(n), &failing);
                check_outcomes(&outcomes, n, &culprits, 500);
                (calls.get(), stage.replacements)
            };
            let (thrown, kept) = calls_for(exception);
            let (trapped, _) = calls_for(trap);
            assert_eq!(kept, 0, "an error keeps the instance");
            assert!(
                thrown <= trapped,
                "n={n}: {thrown} calls for an error, {trapped} for a trap"
            );
        }
    }

    #[test]
    fn a_plugin_that_fails_every_call_fails_every_item_after_bisecting() {
        let culprits: HashSet<usize> = (0..8).collect();
        let calls = Cell::new(0);
        let mut stage = FakeStage::default();
        let outcomes = run_all(
            &mut stage,
            items(8),
            &requests(8),
            &call_failing_on(&culprits, &calls, exception),
        );
        check_outcomes(&outcomes, 8, &culprits, 500);
        // Every node of the halving tree: the documented cost, 2·n − 1 calls in all.
        assert_eq!(calls.get(), 2 * 8 - 1);
    }

    #[test]
    fn items_nobody_waits_for_are_answered_504_without_a_call() {
        let calls = Cell::new(0);
        let mut stage = FakeStage::default();
        let audience = Requests {
            drop_odd: true,
            ..requests(1)
        };
        let seen = Cell::new(0);
        let counting = |instance: &mut u32, items: &mut [Indexed]| {
            seen.set(seen.get() + items.len());
            call_failing_on(&HashSet::new(), &calls, trap)(instance, items)
        };
        let outcomes = run_all(&mut stage, items(10), &audience, &counting);
        assert_eq!(seen.get(), 5, "only the wanted items reach the plugin");
        for (index, outcome) in &outcomes {
            if index % 2 == 1 {
                assert_eq!(outcome.as_ref().unwrap_err().status, 504);
            } else {
                assert!(outcome.is_ok());
            }
        }
        assert_eq!(outcomes.len(), 10);
    }

    #[test]
    fn an_instance_that_cannot_be_recreated_answers_503() {
        let calls = Cell::new(0);
        let mut stage = FakeStage {
            unavailable: true,
            ..FakeStage::default()
        };
        let outcomes = run_all(
            &mut stage,
            items(3),
            &Everyone,
            &call_failing_on(&HashSet::new(), &calls, trap),
        );
        assert_eq!(calls.get(), 0);
        assert!(outcomes.iter().all(|(_, o)| o.as_ref().unwrap_err().status == 503));
    }

    /// Every item its own request; re-runs are handed back.
    struct Queued;

    impl Audience for Queued {
        fn wanted(&self, _: usize) -> bool {
            true
        }

        fn request(&self, index: usize) -> u64 {
            index as u64
        }

        fn takes_reruns(&self) -> bool {
            true
        }
    }

    #[test]
    fn re_runs_are_handed_back_to_an_audience_that_takes_them() {
        let culprits: HashSet<usize> = [2].into_iter().collect();
        let calls = Cell::new(0);
        for (failure, parts) in [(trap as fn() -> CallFailure, 2), (timeout, 8)] {
            calls.set(0);
            let mut stage = FakeStage::default();
            let mut deferred = Deferred::new();
            let failing = call_failing_on(&culprits, &calls, failure);
            let outcomes = run_bisected(&mut stage, items(8), &Queued, &failing, &mut deferred);
            assert!(outcomes.is_empty(), "nothing re-runs here");
            assert_eq!(calls.get(), 1, "only the first call ran");
            assert_eq!(deferred.len(), parts);
            let mut handed: Vec<usize> = deferred.iter().flatten().map(|(i, _)| *i).collect();
            handed.sort_unstable();
            assert_eq!(handed, (0..8).collect::<Vec<_>>(), "every item is handed back once");
        }
    }
}
