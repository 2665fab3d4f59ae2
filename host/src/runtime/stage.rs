//! Stages: a compiled plugin ready to instantiate ([`StageTemplate`]), and a live,
//! initialised instance of it ([`StageInstance`]) that calls the plugin.
//!
//! A call that traps (or runs past its deadline) poisons the instance's store: wasmtime
//! refuses to enter it again. [`StageInstance`] therefore reports a [`Trapped`] and its
//! owner replaces it with a fresh instance from the template; nothing ever re-enters a
//! trapped store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::{Store, Trap, WasmBacktrace};

use super::bindings::postprocessor::{Postprocessor, PostprocessorPre};
use super::bindings::predictor::{Predictor, PredictorPre};
use super::bindings::preprocessor::{Preprocessor, PreprocessorPre};
use super::bindings::types as wit;
use super::bindings::v0_1_0;
use super::compile::CompileReport;
use super::convert::{from_wit, from_wit_error, to_wit};
use super::deadline::{self, DeadlinePassed};
use super::store::{new_store, SandboxLimits, StageTag, StoreState};
use super::{Runtime, RuntimeError, WitVersion};
use crate::model::outcome::ItemError;
use crate::model::tensor::{Item, Tensor};
use crate::model::StageKind;
use crate::traces::journal::{self, CallEnd};

/// The WIT world each kind of stage implements.
fn world(kind: StageKind) -> &'static str {
    match kind {
        StageKind::Preprocess => "preprocessor",
        StageKind::Predict => "predictor",
        StageKind::Postprocess => "postprocessor",
    }
}

/// What predict answered for a batch of N items.
#[derive(Debug)]
pub struct Prediction {
    /// Batched outputs, leading dimension N (checked by the pipeline, not here).
    pub outputs: Vec<Tensor>,
    /// Items the plugin failed, by batch index (range-checked by the pipeline).
    pub failures: Vec<(u32, ItemError)>,
}

/// A call trapped or hit its deadline; the instance that made it is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trapped {
    /// The trap, the guest's output (a Rust panic's message lands there) and the wasm
    /// backtrace's function names.
    pub message: String,
    /// The call was interrupted by its time limit rather than failing on its own.
    pub deadline: bool,
}

impl Trapped {
    /// The outcome an item gets for being in a call that trapped alone.
    pub fn item_error(&self) -> ItemError {
        if self.deadline {
            ItemError::deadline(self.message.clone())
        } else {
            ItemError::trap(self.message.clone())
        }
    }
}

/// A linked stage, per kind and WIT version (each version's exports are typed by its own
/// bindings, over the same Rust types).
enum Pre {
    Preprocess(PreprocessorPre<StoreState>),
    Predict(PredictorPre<StoreState>),
    Postprocess(PostprocessorPre<StoreState>),
    Preprocess010(v0_1_0::preprocessor::PreprocessorPre<StoreState>),
    Predict010(v0_1_0::predictor::PredictorPre<StoreState>),
    Postprocess010(v0_1_0::postprocessor::PostprocessorPre<StoreState>),
}

enum Exports {
    Preprocess(Preprocessor),
    Predict(Predictor),
    Postprocess(Postprocessor),
    Preprocess010(v0_1_0::preprocessor::Preprocessor),
    Predict010(v0_1_0::predictor::Predictor),
    Postprocess010(v0_1_0::postprocessor::Postprocessor),
}

/// A compiled, linked stage from which instances are made in microseconds.
pub struct StageTemplate {
    kind: StageKind,
    file: PathBuf,
    wit_version: WitVersion,
    pre: Pre,
    runtime: Runtime,
    model_dir: PathBuf,
    tag: StageTag,
    limits: SandboxLimits,
    parameters: Vec<wit::Parameter>,
    compiled: CompileReport,
    /// Keeps the component in the runtime's register while this stage is loaded, so
    /// another stage with the same bytes shares it.
    _component: Arc<super::memory::CompiledCode>,
}

impl StageTemplate {
    /// Compiles `file` and checks it implements `kind`'s world.
    pub fn load(
        runtime: &Runtime,
        kind: StageKind,
        file: &Path,
        model_dir: &Path,
        tag: StageTag,
        limits: SandboxLimits,
        parameters: &[(String, String)],
    ) -> Result<Arc<Self>, RuntimeError> {
        let load_error = |reason: String| RuntimeError::Load {
            file: file.to_path_buf(),
            reason,
        };
        let (component, compiled) =
            super::compile::compile_file(runtime, file, limits.compile_timeout).map_err(load_error)?;
        // Before linking: a version this host does not know would fail there, less clearly.
        let wit_version = WitVersion::of_component(&component, runtime.engine()).map_err(load_error)?;
        tag.shared.code.add(&component);
        let instance_pre = runtime.linker().instantiate_pre(&component).map_err(|e| {
            load_error(format!(
                "cannot link (imports something the sandbox does not offer?): {e:#}"
            ))
        })?;
        let wrong_world = |e: wasmtime::Error| {
            load_error(format!(
                "does not implement the `{}` world (tensorplug:plugin@{wit_version}): {e:#}",
                world(kind)
            ))
        };
        let pre = match (kind, wit_version) {
            (StageKind::Preprocess, WitVersion::V0_2_0) => {
                Pre::Preprocess(PreprocessorPre::new(instance_pre).map_err(wrong_world)?)
            }
            (StageKind::Predict, WitVersion::V0_2_0) => {
                Pre::Predict(PredictorPre::new(instance_pre).map_err(wrong_world)?)
            }
            (StageKind::Postprocess, WitVersion::V0_2_0) => {
                Pre::Postprocess(PostprocessorPre::new(instance_pre).map_err(wrong_world)?)
            }
            (StageKind::Preprocess, WitVersion::V0_1_0) => {
                Pre::Preprocess010(v0_1_0::preprocessor::PreprocessorPre::new(instance_pre).map_err(wrong_world)?)
            }
            (StageKind::Predict, WitVersion::V0_1_0) => {
                Pre::Predict010(v0_1_0::predictor::PredictorPre::new(instance_pre).map_err(wrong_world)?)
            }
            (StageKind::Postprocess, WitVersion::V0_1_0) => {
                Pre::Postprocess010(v0_1_0::postprocessor::PostprocessorPre::new(instance_pre).map_err(wrong_world)?)
            }
        };
        let parameters = parameters
            .iter()
            .map(|(name, value)| wit::Parameter {
                name: name.clone(),
                value: value.clone(),
            })
            .collect();
        Ok(Arc::new(Self {
            kind,
            file: file.to_path_buf(),
            wit_version,
            pre,
            runtime: runtime.clone(),
            model_dir: model_dir.to_path_buf(),
            tag,
            limits,
            parameters,
            compiled,
            _component: component,
        }))
    }

    pub fn kind(&self) -> StageKind {
        self.kind
    }

    /// How its compile went.
    pub fn compiled(&self) -> CompileReport {
        self.compiled
    }

    /// The `tensorplug:plugin` version the stage was built against.
    pub fn wit_version(&self) -> WitVersion {
        self.wit_version
    }

    /// A fresh instance, initialised with the model's parameters; instantiation and
    /// `init` together end by the init deadline, whatever the plugin does.
    pub fn instantiate(self: &Arc<Self>) -> Result<StageInstance, RuntimeError> {
        let mut store = new_store(self.runtime.engine(), &self.model_dir, self.tag.clone(), self.limits)?;
        let init_error = |reason: String| RuntimeError::Init {
            file: self.file.clone(),
            reason,
        };
        let params = &self.parameters;
        // One instant for the timer, and for `wasi:nn` compute in `init`.
        let until = std::time::Instant::now() + self.limits.init_timeout;
        store.data_mut().arm_deadline(until);
        let started = deadline::within(until, async {
            let exports = match &self.pre {
                Pre::Preprocess(pre) => pre.instantiate_async(&mut store).await.map(Exports::Preprocess),
                Pre::Predict(pre) => pre.instantiate_async(&mut store).await.map(Exports::Predict),
                Pre::Postprocess(pre) => pre.instantiate_async(&mut store).await.map(Exports::Postprocess),
                Pre::Preprocess010(pre) => pre.instantiate_async(&mut store).await.map(Exports::Preprocess010),
                Pre::Predict010(pre) => pre.instantiate_async(&mut store).await.map(Exports::Predict010),
                Pre::Postprocess010(pre) => pre.instantiate_async(&mut store).await.map(Exports::Postprocess010),
            }?;
            let answer = match &exports {
                Exports::Preprocess(e) => e.call_init(&mut store, params).await,
                Exports::Predict(e) => e.call_init(&mut store, params).await,
                Exports::Postprocess(e) => e.call_init(&mut store, params).await,
                Exports::Preprocess010(e) => e.call_init(&mut store, params).await,
                Exports::Predict010(e) => e.call_init(&mut store, params).await,
                Exports::Postprocess010(e) => e.call_init(&mut store, params).await,
            }?;
            Ok::<_, wasmtime::Error>((exports, answer))
        });
        let output = store.data().take_output();
        log_output(store.data().tag(), &output);
        let timeout_ms = self.limits.init_timeout.as_millis();
        match started {
            Ok(Ok((exports, Ok(())))) => {
                store.data_mut().finish_init();
                Ok(StageInstance {
                    template: self.clone(),
                    store,
                    exports,
                })
            }
            Ok(Ok((_, Err(message)))) => Err(init_error(format!("init failed: {message}"))),
            Ok(Err(error)) => {
                let trapped = describe_trap(self.kind, &error, &output, timeout_ms);
                let how = if host_call_failed(&error).is_some() {
                    "init failed"
                } else {
                    "init trapped"
                };
                Err(init_error(format!("{how}: {}", trapped.message)))
            }
            Err(DeadlinePassed) => Err(init_error(format!(
                "init did not finish within its time limit of {timeout_ms} ms (limits.init_timeout_ms)"
            ))),
        }
    }
}

/// A live, initialised instance of one stage.
pub struct StageInstance {
    template: Arc<StageTemplate>,
    store: Store<StoreState>,
    exports: Exports,
}

impl StageInstance {
    pub fn template(&self) -> &Arc<StageTemplate> {
        &self.template
    }

    /// How much linear memory the instance has (its cap is `limits.memory_mib`).
    pub fn memory_bytes(&self) -> usize {
        self.store.data().memory_bytes()
    }

    /// Whether the instance ran into its memory cap (a growth refused) since the last
    /// call to this.
    pub fn take_memory_refused(&mut self) -> bool {
        self.store.data_mut().take_memory_refused()
    }

    /// Runs preprocess or postprocess (whichever this stage is) on `items`.
    ///
    /// The items are lent, not copied: they are moved into the binding's types for the
    /// call (which only borrows them) and moved back after it, whatever it did, so the
    /// caller can re-run them after a trap. (wasmtime 48's `ownership: Borrowing` does
    /// not compile for these worlds: its export signatures use an undeclared lifetime.)
    ///
    /// The answer is not checked here: the pipeline owns contract checks.
    pub fn map_items<'i>(
        &mut self,
        items: impl Iterator<Item = &'i mut Item>,
    ) -> Result<Vec<Result<Item, ItemError>>, Trapped> {
        let mut slots: Vec<&mut Item> = items.collect();
        let lent: Vec<Vec<wit::Tensor>> = slots
            .iter_mut()
            .map(|slot| std::mem::take(*slot).into_iter().map(to_wit).collect())
            .collect();
        let (exports, store) = (&self.exports, &mut self.store);
        let counts = Counts {
            items: lent.len(),
            failed: |answer: &Vec<Result<_, _>>| answer.iter().filter(|r| r.is_err()).count(),
        };
        let answer = call(&self.template, store, counts, async |store| match exports {
            Exports::Preprocess(e) => e.call_preprocess(store, &lent).await,
            Exports::Postprocess(e) => e.call_postprocess(store, &lent).await,
            Exports::Preprocess010(e) => e.call_preprocess(store, &lent).await,
            Exports::Postprocess010(e) => e.call_postprocess(store, &lent).await,
            Exports::Predict(_) | Exports::Predict010(_) => {
                Err(wasmtime::Error::msg("map_items called on a predict stage"))
            }
        });
        for (slot, item) in slots.iter_mut().zip(lent) {
            **slot = item.into_iter().map(from_wit).collect();
        }
        let answer = answer?;
        Ok(answer
            .into_iter()
            .map(|result| {
                result
                    .map(|item| item.into_iter().map(from_wit).collect())
                    .map_err(from_wit_error)
            })
            .collect())
    }

    /// Runs predict on a batch; `Ok(Err(_))` is the plugin failing the whole batch.
    pub fn predict(&mut self, batch: Vec<Tensor>) -> Result<Result<Prediction, ItemError>, Trapped> {
        let items = batch.first().and_then(|t| t.shape.first()).map_or(0, |&n| n as usize);
        let batch: Vec<wit::Tensor> = batch.into_iter().map(to_wit).collect();
        let (exports, store) = (&self.exports, &mut self.store);
        let counts = Counts {
            items,
            failed: |answer: &Result<wit::Prediction, wit::ItemError>| match answer {
                Ok(prediction) => prediction.failures.len(),
                Err(_) => items,
            },
        };
        let answer = call(&self.template, store, counts, async |store| match exports {
            Exports::Predict(e) => e.call_predict(store, &batch).await,
            Exports::Predict010(e) => e.call_predict(store, &batch).await,
            _ => Err(wasmtime::Error::msg("predict called on a non-predict stage")),
        })?;
        Ok(answer
            .map(|p| Prediction {
                outputs: p.outputs.into_iter().map(from_wit).collect(),
                failures: p
                    .failures
                    .into_iter()
                    .map(|f| (f.index, from_wit_error(f.error)))
                    .collect(),
            })
            .map_err(from_wit_error))
    }
}

/// Arms the deadline, makes one call, and forwards the guest's output to the log. A call
/// still running at its deadline (parked in a host call) is dropped there.
fn call<R>(
    template: &StageTemplate,
    store: &mut Store<StoreState>,
    counts: Counts<impl FnOnce(&R) -> usize>,
    make: impl AsyncFnOnce(&mut Store<StoreState>) -> wasmtime::Result<R>,
) -> Result<R, Trapped> {
    // An untraced batch (nearly every one) pays one thread-local read here, nothing more.
    if !journal::is_recording() {
        return call_untraced(template, store, make);
    }
    let started = std::time::Instant::now();
    journal::call_started(template.kind.name());
    let result = call_untraced(template, store, make);
    let (failed, end) = match &result {
        Ok(answer) => ((counts.failed)(answer), CallEnd::Answered),
        Err(trapped) => (
            counts.items,
            CallEnd::Trapped {
                message: trapped.message.clone(),
                deadline: trapped.deadline,
            },
        ),
    };
    journal::call_ended(started.elapsed(), counts.items, failed, end);
    result
}

/// What a traced batch's record says of a call's items: how many it was given, and how
/// to count the ones its answer failed.
struct Counts<F> {
    items: usize,
    failed: F,
}

fn call_untraced<R>(
    template: &StageTemplate,
    store: &mut Store<StoreState>,
    make: impl AsyncFnOnce(&mut Store<StoreState>) -> wasmtime::Result<R>,
) -> Result<R, Trapped> {
    let limit = template.limits.call_timeout;
    arm_epoch_deadline(store, limit);
    // One instant for the timer, and for `wasi:nn` compute (which epochs do not stop).
    let until = std::time::Instant::now() + limit;
    store.data_mut().arm_deadline(until);
    store.data_mut().reset_log_budget();
    let result = deadline::within(until, make(store));
    let output = store.data().take_output();
    log_output(store.data().tag(), &output);
    let dropped = store.data_mut().reset_log_budget();
    if dropped > 0 {
        let tag = store.data().tag();
        tracing::warn!(
            model = &*tag.model,
            version = &*tag.version,
            stage = tag.stage,
            dropped,
            "plugin log lines dropped: more than the per-call budget"
        );
    }
    let limit_ms = limit.as_millis();
    match result {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(describe_trap(template.kind, &error, &output, limit_ms)),
        Err(DeadlinePassed) => Err(Trapped {
            message: format!(
                "{} exceeded its time limit of {limit_ms} ms (inside a host call)",
                template.kind.name()
            ),
            deadline: true,
        }),
    }
}

/// Sets the call's epoch deadline: a trap at `limit`, and on a runtime thread (the idle
/// path) a yield first, after [`deadline::RUNTIME_THREAD_SLICE`] of wasm code, so that a
/// long call gives the runtime thread's place away and goes on (see `deadline::within`).
fn arm_epoch_deadline(store: &mut Store<StoreState>, limit: std::time::Duration) {
    let ticks = deadline::deadline_ticks(limit);
    let slice = deadline::deadline_ticks(deadline::RUNTIME_THREAD_SLICE);
    let (first, after_yield) = if deadline::on_runtime_thread() && ticks > slice {
        (slice, Some(ticks - slice))
    } else {
        (ticks, None)
    };
    store.data_mut().yield_at_first_epoch_deadline(after_yield);
    store.set_epoch_deadline(first);
}

/// Forwards what the guest wrote to stdout/stderr to the log, tagged.
fn log_output(tag: &StageTag, output: &str) {
    if !output.is_empty() {
        tracing::info!(
            model = &*tag.model,
            version = &*tag.version,
            stage = tag.stage,
            "plugin output: {}",
            output.trim_end()
        );
    }
}

/// Turns a wasmtime error into the message an item's client reads; `limit_ms` is the
/// time limit the call ran under.
fn describe_trap(kind: StageKind, error: &wasmtime::Error, output: &str, limit_ms: u128) -> Trapped {
    let trap = error.downcast_ref::<Trap>().copied();
    let deadline = trap == Some(Trap::Interrupt);
    let mut message = if deadline {
        format!("{} exceeded its time limit of {limit_ms} ms", kind.name())
    } else if let Some(os) = host_call_failed(error) {
        // Not the plugin's doing: say so, or its author goes looking for a bug it lacks.
        format!("{} could not run: the host's system call failed: {os}", kind.name())
    } else {
        let mut text = format!("{} trapped: {}", kind.name(), error.root_cause());
        // Name the `model.toml` key behind a limit the plugin ran into.
        let hints = [
            (
                "resource table has no free keys",
                "the instance holds as many open handles as limits.max_handles allows",
            ),
            (
                "exceeds memory limits",
                "limits.memory_mib caps all the instance's memories together",
            ),
            (
                "exceeds table limits",
                "limits.table_elements caps all the instance's tables together",
            ),
        ];
        if let Some((_, hint)) = hints.iter().find(|(symptom, _)| text.contains(symptom)) {
            text.push_str(&format!(" ({hint})"));
        }
        text
    };
    let output = guest_output_for_clients(output);
    if !output.is_empty() {
        message.push_str("; plugin output: ");
        message.push_str(&output);
    }
    if let Some(backtrace) = error.downcast_ref::<WasmBacktrace>() {
        let names: Vec<String> = backtrace
            .frames()
            .iter()
            .filter_map(|f| f.func_name())
            .map(|name| format!("{:#}", rustc_demangle::demangle(name)))
            .filter(|name| !is_runtime_frame(name))
            .take(8)
            .collect();
        if !names.is_empty() {
            message.push_str("; wasm backtrace: ");
            message.push_str(&names.join(" <- "));
        }
    }
    Trapped { message, deadline }
}

/// The system call's error, when `error` is not a trap of the plugin's but a system call
/// of the host's that failed.
fn host_call_failed(error: &wasmtime::Error) -> Option<&std::io::Error> {
    if error.downcast_ref::<Trap>().is_some() {
        return None;
    }
    super::os_error(error)
}

/// The guest's output without the Rust runtime's hint about RUST_BACKTRACE, which a
/// client cannot act on.
fn guest_output_for_clients(output: &str) -> String {
    output
        .lines()
        .filter(|line| !line.starts_with("note: run with `RUST_BACKTRACE=1`"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// Frames of the guest's language runtime (panic machinery, allocator, abort), which say
/// nothing about where the plugin failed.
fn is_runtime_frame(name: &str) -> bool {
    const RUNTIME: [&str; 7] = [
        "std::",
        "core::",
        "alloc::",
        "__rustc::",
        "__rust",
        "abort",
        "rust_panic",
    ];
    RUNTIME.iter().any(|prefix| name.starts_with(prefix)) || name.starts_with('<') && name.contains(" as core::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_frames_are_recognised() {
        assert!(is_runtime_frame("std::panicking::panic_with_hook"));
        assert!(is_runtime_frame("__rustc::rust_begin_unwind"));
        assert!(!is_runtime_frame("faulty::predict_item"));
        assert!(!is_runtime_frame("predict"));
    }

    #[test]
    fn a_system_call_failing_in_the_host_is_not_called_a_trap() {
        let busy = std::io::Error::from_raw_os_error(libc::EBUSY);
        let error = wasmtime::Error::from(busy).context("cannot add seals to the memfd");
        let described = describe_trap(StageKind::Predict, &error, "", 1000);
        assert_eq!(
            described.message,
            "predict could not run: the host's system call failed: Device or resource busy (os error 16)"
        );
        assert!(!described.deadline);
        let trap = wasmtime::Error::from(Trap::UnreachableCodeReached);
        let described = describe_trap(StageKind::Predict, &trap, "", 1000);
        assert!(
            described.message.starts_with("predict trapped: "),
            "{}",
            described.message
        );
    }

    #[test]
    fn backtrace_hint_is_dropped() {
        let out = "thread panicked at x.rs:1:2:\nboom\nnote: run with `RUST_BACKTRACE=1` environment variable\n";
        assert_eq!(guest_output_for_clients(out), "thread panicked at x.rs:1:2:\nboom");
    }
}
