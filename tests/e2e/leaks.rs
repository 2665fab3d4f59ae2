//! A plugin's memory over many calls, per language: the digits predict stage called 20,000
//! times at batch 1 on one instance (as the host calls it, through the runtime), and its
//! linear memory's growth divided by the calls. A plugin that leaks runs into its
//! `memory_mib` and traps; the host replaces it and re-runs the call, so no request fails,
//! but every trap costs a replacement.
//!
//! The bounds are what each toolchain allows: Rust and C (since the C SDK frees tensor
//! arguments itself: wit-bindgen 0.63's generated `*_list_tensor_free` forgets each
//! tensor's data, 272 bytes a call at batch 1) leak nothing; wit-bindgen 0.63's C++
//! bindings leak each argument list's array (32 bytes a call); componentize-py 0.25.1
//! leaks ~70 bytes a call in its own runtime (a plugin without the SDK does too). Page
//! granularity (64 KiB) is allowed on top.

use std::path::Path;
use std::time::Duration;

use crate::common;

use tensorplug::model::tensor::{DataType, Tensor};
use tensorplug::model::StageKind;
use tensorplug::runtime::{Runtime, SandboxLimits, StageTag, StageTemplate};

const CALLS: usize = 20_000;
const PAGE: usize = 64 << 10;

/// Calls the predict stage of `examples/models/<model>` `CALLS` times and returns its
/// linear memory's growth in bytes per call (after a first call, which sizes the heap).
fn growth_per_call(model: &str) -> f64 {
    let dir = common::examples().join(model);
    common::require_plugins(dir.parent().unwrap());
    let runtime = Runtime::new(Some(&common::compile_cache())).expect("runtime");
    let tag = StageTag {
        model: model.into(),
        version: "1".into(),
        stage: "predict",
        shared: Default::default(),
    };
    let limits = SandboxLimits {
        memory_bytes: 64 << 20,
        table_elements: 10_000,
        max_handles: 128,
        call_timeout: Duration::from_secs(10),
        init_timeout: Duration::from_secs(60),
        compile_timeout: Duration::from_secs(600),
    };
    let template = StageTemplate::load(
        &runtime,
        StageKind::Predict,
        &dir.join("predict.wasm"),
        Path::new(&dir),
        tag,
        limits,
        &[],
    )
    .expect("load");
    let mut instance = template.instantiate().expect("instance");
    let pixels: Vec<u8> = (0..64u32).flat_map(|i| ((i * 7 % 17) as f32).to_le_bytes()).collect();
    let batch = vec![Tensor {
        name: "input-0".into(),
        datatype: DataType::Fp32,
        shape: vec![1, 64],
        data: pixels,
    }];
    let call = |instance: &mut tensorplug::runtime::StageInstance| {
        instance
            .predict(batch.clone())
            .expect("no trap")
            .expect("no batch error");
    };
    call(&mut instance);
    let before = instance.memory_bytes();
    for _ in 0..CALLS {
        call(&mut instance);
    }
    let grown = instance.memory_bytes() - before;
    eprintln!(
        "{model}: linear memory {before} -> {} bytes over {CALLS} calls",
        before + grown
    );
    grown.saturating_sub(PAGE) as f64 / CALLS as f64
}

#[test]
fn rust_and_c_plugins_do_not_leak() {
    for model in ["digits", "digits-c"] {
        let per_call = growth_per_call(model);
        assert_eq!(per_call, 0.0, "{model} leaks {per_call} bytes a call");
    }
}

#[test]
fn cpp_and_python_plugins_leak_no_more_than_their_toolchains() {
    for (model, bound) in [("digits-cpp", 32.0), ("digits-python", 96.0)] {
        let per_call = growth_per_call(model);
        assert!(
            per_call <= bound,
            "{model} leaks {per_call} bytes a call (its toolchain: {bound})"
        );
    }
}
