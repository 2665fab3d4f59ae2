//! The export macros, and the hidden runtime they expand to.
//!
//! `export_predictor!(Foo)` expands (inside an anonymous `const _: () = { .. };`) to
//!
//! - a `thread_local!` `Instance<Foo>`: the one `Foo` of this plugin instance, empty
//!   until `init` succeeds (a wasm instance has a single thread, so this is a plain
//!   static there);
//! - a hidden adapter type implementing wit-bindgen's `Guest` trait for the `predictor`
//!   world, whose functions all call `__export::predictor::<Foo, _>`;
//! - wit-bindgen's own export macro for that adapter, which emits the wasm exports.
//!
//! That one function carries the `Foo: Predictor` bound, so a type that does not
//! implement the trait is reported once and in the SDK's terms (see the
//! `#[diagnostic::on_unimplemented]` on [`Predictor`](crate::Predictor)), never as a
//! missing wit-bindgen `Guest`.

/// What every export macro expands to, for the stage's world: the one instance of the
/// plugin's type, and an adapter implementing the world's `Guest` trait whose functions
/// all go through `__export::$dispatch` (which carries the `$ty: Trait` bound).
#[doc(hidden)]
#[macro_export]
macro_rules! __export_stage {
    (
        $ty:ty, $world:ident, $world_export:ident, $dispatch:ident,
        fn $method:ident($arg:ident: $arg_ty:ty) -> $ret:ty => $call:ident
    ) => {
        const _: () = {
            ::std::thread_local! {
                static __TENSORPLUG_INSTANCE: $crate::__export::Instance<$ty> =
                    const { $crate::__export::Instance::new() };
            }

            #[doc(hidden)]
            struct __TensorplugStage;

            impl $crate::bindings::$world::Guest for __TensorplugStage {
                fn init(
                    parameters: ::std::vec::Vec<$crate::Parameter>,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    let call = $crate::__export::Init(parameters);
                    $crate::__export::$dispatch::<$ty, _>(&__TENSORPLUG_INSTANCE, call)
                }

                fn $method($arg: $arg_ty) -> $ret {
                    let call = $crate::__export::$call($arg);
                    $crate::__export::$dispatch::<$ty, _>(&__TENSORPLUG_INSTANCE, call)
                }
            }

    $crate::$world_export!(__TensorplugStage with_types_in $crate::bindings::$world);
        };
    };
}

/// Exports a [`Predictor`](crate::Predictor) implementation as this plugin's predict stage.
///
/// Use it once per plugin crate, at the top level, with the type whose
/// [`init`](crate::Predictor::init) builds the plugin's state:
///
/// ```no_run
/// use tensorplug_guest::prelude::*;
///
/// struct Identity;
///
/// impl Predictor for Identity {
///     fn init(_: Parameters) -> Result<Self, String> {
///         Ok(Identity)
///     }
///
///     fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
///         Ok(Prediction::new(batch))
///     }
/// }
///
/// export_predictor!(Identity);
/// ```
///
/// The plugin instance keeps exactly one value of the type: `init` stores it and every
/// `predict` borrows it mutably. A `predict` before a successful `init` answers 500
/// `"predict called before init"` for the whole batch. `init` succeeds at most once per
/// instance: a second call (the host never makes one) answers `"init called twice"` and
/// keeps the state of the first.
///
/// The type may be given as a path (`export_predictor!(model::Net)`). The expansion names
/// the SDK through `$crate`, so it works whatever the plugin calls the dependency.
#[macro_export]
macro_rules! export_predictor {
    ($ty:ty $(,)?) => {
        $crate::__export_stage!(
            $ty, predictor, __export_predictor_impl, predictor,
            fn predict(batch: ::std::vec::Vec<$crate::Tensor>)
                -> ::std::result::Result<$crate::Prediction, $crate::ItemError> => Predict
        );
    };
}

/// Exports a [`Preprocessor`](crate::Preprocessor) implementation as this plugin's
/// preprocess stage.
///
/// As [`export_predictor!`]: one value per plugin instance, built by `init`; a
/// `preprocess` before a successful `init` answers 500 `"preprocess called before init"`
/// for every item; a second `init` answers `"init called twice"` and keeps the first
/// state.
///
/// ```no_run
/// use tensorplug_guest::prelude::*;
///
/// struct PassThrough;
///
/// impl Preprocessor for PassThrough {
///     fn init(_: Parameters) -> Result<Self, String> {
///         Ok(PassThrough)
///     }
///
///     fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
///         items.into_iter().map(Ok).collect()
///     }
/// }
///
/// export_preprocessor!(PassThrough);
/// ```
#[macro_export]
macro_rules! export_preprocessor {
    ($ty:ty $(,)?) => {
        $crate::__export_stage!(
            $ty, preprocessor, __export_preprocessor_impl, preprocessor,
            fn preprocess(items: ::std::vec::Vec<$crate::Item>)
                -> ::std::vec::Vec<::std::result::Result<$crate::Item, $crate::ItemError>> => Preprocess
        );
    };
}

/// Exports a [`Postprocessor`](crate::Postprocessor) implementation as this plugin's
/// postprocess stage.
///
/// As [`export_predictor!`]: one value per plugin instance, built by `init`; a
/// `postprocess` before a successful `init` answers 500 `"postprocess called before
/// init"` for every item; a second `init` answers `"init called twice"` and keeps the
/// first state.
///
/// ```no_run
/// use tensorplug_guest::prelude::*;
///
/// struct PassThrough;
///
/// impl Postprocessor for PassThrough {
///     fn init(_: Parameters) -> Result<Self, String> {
///         Ok(PassThrough)
///     }
///
///     fn postprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
///         items.into_iter().map(Ok).collect()
///     }
/// }
///
/// export_postprocessor!(PassThrough);
/// ```
#[macro_export]
macro_rules! export_postprocessor {
    ($ty:ty $(,)?) => {
        $crate::__export_stage!(
            $ty, postprocessor, __export_postprocessor_impl, postprocessor,
            fn postprocess(items: ::std::vec::Vec<$crate::Item>)
                -> ::std::vec::Vec<::std::result::Result<$crate::Item, $crate::ItemError>> => Postprocess
        );
    };
}

/// What the export macros expand to. Not a stable API.
#[doc(hidden)]
pub mod __export {
    use std::cell::RefCell;
    use std::thread::LocalKey;

    use crate::{Item, ItemError, Parameter, Parameters, Postprocessor, Prediction, Predictor, Preprocessor, Tensor};

    /// What an item-wise stage answers: one result per item.
    type ItemResults = Vec<Result<Item, ItemError>>;

    /// The one state value of a plugin instance: empty until `init` succeeds.
    pub struct Instance<T>(RefCell<Option<T>>);

    impl<T> Instance<T> {
        /// An instance before `init`.
        #[allow(clippy::new_without_default)]
        pub const fn new() -> Self {
            Instance(RefCell::new(None))
        }
    }

    /// The answer to an `init` after a successful one.
    pub const INIT_TWICE: &str = "init called twice (the instance keeps the state of the first init)";

    /// Runs `make` and stores its value, unless the instance is initialised already.
    fn init<T>(key: &'static LocalKey<Instance<T>>, make: impl FnOnce() -> Result<T, String>) -> Result<(), String> {
        key.with(|instance| {
            if instance.0.try_borrow().map_or(true, |state| state.is_some()) {
                return Err(INIT_TWICE.to_string());
            }
            // No borrow is held while the plugin's `init` runs.
            let state = make()?;
            *instance.0.borrow_mut() = Some(state);
            Ok(())
        })
    }

    /// Calls `f` with the state, or answers 500 when there is none.
    fn with_state<T, R>(
        key: &'static LocalKey<Instance<T>>,
        call: &str,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<R, ItemError> {
        key.with(|instance| {
            let Ok(mut state) = instance.0.try_borrow_mut() else {
                return Err(ItemError::internal(format!(
                    "{call} called while another call is running"
                )));
            };
            match state.as_mut() {
                Some(state) => Ok(f(state)),
                None => Err(ItemError::internal(format!("{call} called before init"))),
            }
        })
    }

    /// One copy of `error` per item: an item-wise stage answers one result per item.
    fn fail_all(items: &[Item], error: ItemError) -> ItemResults {
        items.iter().map(|_| Err(error.clone())).collect()
    }

    /// The arguments of `init`, for any stage.
    pub struct Init(pub Vec<Parameter>);
    /// The arguments of `predict`.
    pub struct Predict(pub Vec<Tensor>);
    /// The arguments of `preprocess`.
    pub struct Preprocess(pub Vec<Item>);
    /// The arguments of `postprocess`.
    pub struct Postprocess(pub Vec<Item>);

    /// A call of the predictor world, answered by the instance's state.
    pub trait PredictorCall<T> {
        /// What the world's function returns.
        type Answer;
        /// Answers the call.
        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Predictor;
    }

    /// A call of the preprocessor world, answered by the instance's state.
    pub trait PreprocessorCall<T> {
        /// What the world's function returns.
        type Answer;
        /// Answers the call.
        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Preprocessor;
    }

    /// A call of the postprocessor world, answered by the instance's state.
    pub trait PostprocessorCall<T> {
        /// What the world's function returns.
        type Answer;
        /// Answers the call.
        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Postprocessor;
    }

    // Every export of a world goes through one function, the only place that demands
    // `T: Predictor` (and so on): a type that does not implement the trait gets one error,
    // not one per export.

    /// Answers a call of the predictor world (`init` or `predict`).
    pub fn predictor<T: Predictor, C: PredictorCall<T>>(
        instance: &'static LocalKey<Instance<T>>,
        call: C,
    ) -> C::Answer {
        call.call(instance)
    }

    /// Answers a call of the preprocessor world (`init` or `preprocess`).
    pub fn preprocessor<T: Preprocessor, C: PreprocessorCall<T>>(
        instance: &'static LocalKey<Instance<T>>,
        call: C,
    ) -> C::Answer {
        call.call(instance)
    }

    /// Answers a call of the postprocessor world (`init` or `postprocess`).
    pub fn postprocessor<T: Postprocessor, C: PostprocessorCall<T>>(
        instance: &'static LocalKey<Instance<T>>,
        call: C,
    ) -> C::Answer {
        call.call(instance)
    }

    impl<T> PredictorCall<T> for Init {
        type Answer = Result<(), String>;

        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Predictor,
        {
            init(instance, || T::init(Parameters::new(self.0)))
        }
    }

    impl<T> PredictorCall<T> for Predict {
        type Answer = Result<Prediction, ItemError>;

        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Predictor,
        {
            with_state(instance, "predict", |state| state.predict(self.0))?
        }
    }

    impl<T> PreprocessorCall<T> for Init {
        type Answer = Result<(), String>;

        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Preprocessor,
        {
            init(instance, || T::init(Parameters::new(self.0)))
        }
    }

    impl<T> PreprocessorCall<T> for Preprocess {
        type Answer = ItemResults;

        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Preprocessor,
        {
            item_wise(instance, "preprocess", self.0, T::preprocess)
        }
    }

    impl<T> PostprocessorCall<T> for Init {
        type Answer = Result<(), String>;

        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Postprocessor,
        {
            init(instance, || T::init(Parameters::new(self.0)))
        }
    }

    impl<T> PostprocessorCall<T> for Postprocess {
        type Answer = ItemResults;

        fn call(self, instance: &'static LocalKey<Instance<T>>) -> Self::Answer
        where
            T: Postprocessor,
        {
            item_wise(instance, "postprocess", self.0, T::postprocess)
        }
    }

    /// Calls an item-wise stage, or fails every item when there is no state.
    fn item_wise<T>(
        instance: &'static LocalKey<Instance<T>>,
        call: &str,
        items: Vec<Item>,
        stage: fn(&mut T, Vec<Item>) -> ItemResults,
    ) -> ItemResults {
        // The items move into the call only once the state is known to be there, so that
        // a refusal can still answer one error per item.
        let mut items = Some(items);
        match with_state(instance, call, |state| {
            stage(state, items.take().expect("items are taken once"))
        }) {
            Ok(results) => results,
            Err(error) => fail_all(items.as_deref().unwrap_or_default(), error),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Counts calls, so the tests can see that one value lives across them.
        struct Counter {
            offset: f32,
            calls: u32,
        }

        impl Predictor for Counter {
            fn init(parameters: Parameters) -> Result<Self, String> {
                if parameters.parse_or("fail", false)? {
                    return Err("init failed as asked".into());
                }
                Ok(Counter {
                    offset: parameters.parse_or("offset", 0.0)?,
                    calls: 0,
                })
            }

            fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
                self.calls += 1;
                let x = batch.first().ok_or_else(|| ItemError::bad_request("empty"))?;
                let y: Vec<f32> = x.to_f32()?.iter().map(|v| v + self.offset).collect();
                Ok(Prediction::new(vec![
                    Tensor::from_f32("y", &x.shape, &y),
                    Tensor::from_u32("calls", &[], &[self.calls]),
                ]))
            }
        }

        impl Preprocessor for Counter {
            fn init(parameters: Parameters) -> Result<Self, String> {
                <Self as Predictor>::init(parameters)
            }

            fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
                self.calls += 1;
                let calls = self.calls;
                items
                    .into_iter()
                    .map(|mut item| {
                        item.push(Tensor::from_u32("calls", &[], &[calls]));
                        Ok(item)
                    })
                    .collect()
            }
        }

        impl Postprocessor for Counter {
            fn init(parameters: Parameters) -> Result<Self, String> {
                <Self as Predictor>::init(parameters)
            }

            fn postprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
                Preprocessor::preprocess(self, items)
            }
        }

        fn params(pairs: &[(&str, &str)]) -> Vec<Parameter> {
            pairs
                .iter()
                .map(|(name, value)| Parameter {
                    name: name.to_string(),
                    value: value.to_string(),
                })
                .collect()
        }

        fn calls(tensors: &[Tensor]) -> u32 {
            tensors.iter().find(|t| t.name == "calls").unwrap().to_u32().unwrap()[0]
        }

        // Each test runs on its own thread, so each starts with empty instances.
        thread_local! {
            static PREDICTOR: Instance<Counter> = const { Instance::new() };
            static PREPROCESSOR: Instance<Counter> = const { Instance::new() };
            static POSTPROCESSOR: Instance<Counter> = const { Instance::new() };
        }

        #[test]
        fn predict_before_init_is_500_and_state_persists_after() {
            let batch = || vec![Tensor::from_f32("x", &[2], &[1.0, 2.0])];
            let e = predictor(&PREDICTOR, Predict(batch())).unwrap_err();
            assert_eq!((e.status, e.message.as_str()), (500, "predict called before init"));

            predictor(&PREDICTOR, Init(params(&[("offset", "10")]))).unwrap();
            let first = predictor(&PREDICTOR, Predict(batch())).unwrap();
            assert_eq!(first.outputs[0].to_f32().unwrap(), [11.0, 12.0]);
            assert_eq!(calls(&first.outputs), 1);
            assert_eq!(calls(&predictor(&PREDICTOR, Predict(batch())).unwrap().outputs), 2);

            // A second init is refused and the state (and its call count) survives.
            assert_eq!(
                predictor(&PREDICTOR, Init(params(&[("offset", "99")]))),
                Err(INIT_TWICE.to_string())
            );
            let third = predictor(&PREDICTOR, Predict(batch())).unwrap();
            assert_eq!(third.outputs[0].to_f32().unwrap(), [11.0, 12.0]);
            assert_eq!(calls(&third.outputs), 3);
        }

        #[test]
        fn a_failed_init_leaves_no_state() {
            assert_eq!(
                predictor(&PREDICTOR, Init(params(&[("fail", "true")]))),
                Err("init failed as asked".to_string())
            );
            let e = predictor(&PREDICTOR, Predict(vec![])).unwrap_err();
            assert_eq!(e.message, "predict called before init");
            assert!(predictor(&PREDICTOR, Init(params(&[("offset", "x")])))
                .unwrap_err()
                .starts_with("parameter 'offset'"));
        }

        #[test]
        fn item_wise_stages_answer_every_item_before_init() {
            let items = || vec![vec![Tensor::from_u8("a", &[], &[1])], vec![]];
            let before = preprocessor(&PREPROCESSOR, Preprocess(items()));
            assert_eq!(
                before,
                vec![
                    Err(ItemError::internal("preprocess called before init")),
                    Err(ItemError::internal("preprocess called before init")),
                ]
            );
            preprocessor(&PREPROCESSOR, Init(vec![])).unwrap();
            let after = preprocessor(&PREPROCESSOR, Preprocess(items()));
            assert_eq!(after.len(), 2);
            assert_eq!(calls(after[1].as_ref().unwrap()), 1);
            assert_eq!(
                calls(preprocessor(&PREPROCESSOR, Preprocess(items()))[0].as_ref().unwrap()),
                2
            );

            let before = postprocessor(&POSTPROCESSOR, Postprocess(items()));
            assert_eq!(before[1], Err(ItemError::internal("postprocess called before init")));
            postprocessor(&POSTPROCESSOR, Init(vec![])).unwrap();
            assert_eq!(
                calls(postprocessor(&POSTPROCESSOR, Postprocess(items()))[0].as_ref().unwrap()),
                1
            );
            assert_eq!(postprocessor(&POSTPROCESSOR, Init(vec![])), Err(INIT_TWICE.to_string()));
        }
    }
}
