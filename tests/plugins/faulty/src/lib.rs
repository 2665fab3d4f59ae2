//! A predictor that misbehaves on request, for fault-injection tests of the host.
//!
//! Input `x: FP32 [N, 1]`, output `y: FP32 [N, 1] = scale * x` (parameter `scale`,
//! default 2). An item whose value is one of these codes triggers a fault:
//!
//! | x | fault |
//! | --- | --- |
//! | -1 | panic "faulty: panic requested" (trap) |
//! | -2 | infinite loop (deadline) |
//! | -3 | allocates until memory runs out (trap) |
//! | -4 | unbounded recursion (stack overflow trap) |
//! | -5 | item failure 422 "faulty: item rejected" |
//! | -6 | `y` gets N+1 rows |
//! | -7 | the output is named `wrong` instead of `y` |
//! | -8 | an item failure with index N (out of range) |
//! | -9 | sleeps 3 s in a host call (WASI), where no epoch check can stop it |
//! | -10 | opens files of its model folder without closing them, 100,000 times |
//! | -11 | writes 1,000,000 lines through the `log` interface |
//! | -12 | an item failure 422 with a 10 MiB message |
//! | -13 | the batch's outputs hold `y` twice |
//! | -14 | the batch's outputs hold 100,000 more tensors |
//! | -15 | predict fails the whole batch (400 "faulty: batch rejected") |
//! | -16 | updates a metric with an invalid name; the host's refusal becomes the item's 422 |
//! | -17 | sets the counter `batches` as a gauge; the refusal becomes the item's 422 |
//! | -18 | declares metadata after init; the refusal becomes the item's 422 |
//! | -19 | creates metric names until the host refuses; the refusal becomes the item's 422 |
//! | -20 | runs the `wasi:nn` graph `digits` (`[graphs]`) in a loop, forever (deadline) |
//! | -21 | runs `digits` on an input of the wrong shape; the host's refusal is the item's error |
//! | -22 | runs `digits` on an input of the wrong type; the host's refusal is the item's error |
//! | -23 | passes graph bytes to `wasi:nn`'s `load`; the host's refusal becomes the item's 422 |
//! | -24 | keeps 16 MiB more of linear memory, written, on every such item: a plugin that grows after its load (answered as usual) |
//! | -50 | an item failure 422 whose message holds every byte a header must not: control characters, CR/LF, NUL, DEL, non-ASCII, 64 KiB of it |
//! | -51 | the item's row of `y` is 16 MiB wide (4 Mi values; declare `y`'s shape `[-1]`) |
//! | -30..-39 | plugin metrics written to forge, break or bloat `/metrics` (see `metric_faults`) |
//! | -60 | opens and reads `fifo` in its model folder; an error becomes the item's 422 |
//! | -61 | the same through `fifo-link` (a symlink to it) |
//! | -70 | predict fails the whole batch with 500 "faulty: uncaught exception" (what a JavaScript `throw` becomes) |
//! | -40 | runs the graph `heavy` once on `x`: FP32 [256, 1024] of ones (long but legal compute) |
//! | -41 | runs the graph `wide` once on `x`: FP32 [1024, 1] of ones; its refusal is the item's 422 |
//!
//! It keeps metrics: the counter `batches`, the gauge `last_batch_size` and the histogram
//! `item_value` (each item's |x|), and declares the metadata `purpose` and `scale`.
//!
//! With the parameter `fail_init = "true"`, `init` fails; with `sleep_init_ms = N`,
//! `init` first sleeps N ms (in a host call); with `keep_mib = N`, `init` keeps N MiB of
//! linear memory, written (a model that holds that much once loaded); with
//! `random_metadata = "true"`, every
//! `init` also declares the metadata `nonce` with a value of its own; with
//! `init_graph = "heavy"`, `init` runs the graph `heavy` once as code -40 does.

use std::hint::black_box;

use tensorplug_guest::prelude::*;

mod metric_faults;

struct Faulty {
    /// The multiplier, from the `scale` parameter.
    scale: f32,
}

impl Predictor for Faulty {
    fn init(parameters: Parameters) -> Result<Self, String> {
        let sleep_ms: u64 = parameters.parse_or("sleep_init_ms", 0)?;
        if sleep_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(sleep_ms));
        }
        if parameters.parse_or("init_graph", String::new())? == "heavy" {
            nn_graph_fault(-40.0).map_or(Ok(()), |error| Err(format!("faulty: init_graph: {error:?}")))?;
        }
        let keep_mib: usize = parameters.parse_or("keep_mib", 0)?;
        if keep_mib > 0 {
            std::mem::forget(black_box(vec![1u8; keep_mib << 20]));
        }
        if parameters.parse_or("fail_init", false)? {
            return Err("faulty: init failed as configured".into());
        }
        let scale: f32 = parameters.parse_or("scale", 2.0)?;
        metadata::declare("purpose", "fault injection")?;
        metadata::declare("scale", &scale.to_string())?;
        if parameters.parse_or("random_metadata", false)? {
            metadata::declare("nonce", &nonce().to_string())?;
        }
        Ok(Faulty { scale })
    }

    fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
        let scale = self.scale;
        let x = batch.input("x")?;
        x.expect_shape(&[-1, 1])?;
        let n = x.batch_size()?;

        let mut y = Vec::with_capacity(n + 1);
        let mut failures = Vec::new();
        let (mut extra_row, mut wrong_name, mut bad_index) = (false, false, false);
        let (mut twice, mut flood) = (false, false);
        let refused = |result: Result<(), String>| result.err().map(|reason| ItemError::new(422, reason));
        for (i, &v) in x.values::<f32>()?.iter().enumerate() {
            let _ = metrics::histogram_observe("item_value", &[], f64::from(v.abs()));
            let misuse = match fault_code(v) {
                Some(16) => refused(metrics::counter_add("bad name!", &[], 1.0)),
                Some(17) => refused(metrics::gauge_set("batches", &[], 1.0)),
                Some(18) => refused(metadata::declare("late", "too late")),
                Some(19) => (0..100).find_map(|k| refused(metrics::gauge_set(&format!("flood_{k}"), &[], 1.0))),
                _ => None,
            };
            if let Some(error) = misuse {
                failures.push(error.at(i as u32));
            }
            let nn_failure = match fault_code(v) {
                Some(20) => nn_loop(),
                Some(21) => nn_compute(Tensor::from_f32("input-0", &[1, 63], &[0.0; 63])).err(),
                Some(22) => nn_compute(Tensor::from_i32("input-0", &[1, 64], &[0; 64])).err(),
                Some(23) => nn_load_bytes().err(),
                _ => None,
            };
            if let Some(error) = nn_failure.or_else(|| nn_graph_fault(v)) {
                failures.push(error.at(i as u32));
            }
            let hostile = code_in(v, 30..=39)
                .and_then(metric_faults::run)
                .or_else(|| sandbox_fault(v));
            if let Some(error) = hostile {
                failures.push(error.at(i as u32));
            }
            match fault_code(v) {
                Some(1) => panic!("faulty: panic requested"),
                Some(2) => spin(),
                Some(3) => exhaust_memory(),
                Some(4) => {
                    recurse(0);
                }
                Some(5) => failures.push(ItemError::new(422, "faulty: item rejected").at(i as u32)),
                Some(6) => extra_row = true,
                Some(7) => wrong_name = true,
                Some(8) => bad_index = true,
                Some(9) => std::thread::sleep(std::time::Duration::from_secs(3)),
                Some(10) => hoard_handles(),
                Some(11) => {
                    for line in 0..1_000_000 {
                        log::info(&format!("faulty: flood line {line}"));
                    }
                }
                Some(12) => failures.push(ItemError::new(422, "m".repeat(10 << 20)).at(i as u32)),
                Some(13) => twice = true,
                Some(14) => flood = true,
                Some(15) => return Err(ItemError::bad_request("faulty: batch rejected")),
                Some(24) => std::mem::forget(black_box(vec![1u8; 16 << 20])),
                _ => {}
            }
            if code_in(v, 70..=79) == Some(70) {
                return Err(ItemError::new(500, "faulty: uncaught exception"));
            }
            y.push(scale * v);
        }

        // Rows wider than one value (fault -51): every row as wide as the widest.
        let wide = x.values::<f32>()?.iter().any(|&v| code_in(v, 50..=59) == Some(51));
        let width: usize = if wide { WIDE_ROW } else { 1 };
        for (i, &v) in x.values::<f32>()?.iter().enumerate() {
            if code_in(v, 50..=59) == Some(50) {
                failures.push(ItemError::new(422, hostile_message()).at(i as u32));
            }
        }
        if extra_row {
            y.push(0.0);
        }
        if width > 1 {
            y = y.iter().flat_map(|&v| std::iter::repeat_n(v, width)).collect();
        }
        if bad_index {
            failures.push(ItemError::internal("faulty: index out of range").at(n as u32));
        }
        let name = if wrong_name { "wrong" } else { "y" };
        let rows = y.len() as u64;
        let mut outputs = vec![Tensor::from_f32(name, &[rows / width as u64, width as u64], &y)];
        if twice {
            outputs.push(Tensor::from_f32(name, &[rows, 1], &y));
        }
        if flood {
            let zeros = vec![0.0; y.len()];
            outputs.extend((0..100_000).map(|k| Tensor::from_f32(format!("extra{k}"), &[rows, 1], &zeros)));
        }
        metrics::counter_add("batches", &[], 1.0).map_err(ItemError::internal)?;
        metrics::gauge_set("last_batch_size", &[], n as f64).map_err(ItemError::internal)?;
        Ok(Prediction::with_failures(outputs, failures))
    }
}

/// `Some(k)` when `v` is exactly `-k` for a fault code `k` in 1..=24.
fn fault_code(v: f32) -> Option<u8> {
    code_in(v, 1..=24)
}

/// `Some(k)` when `v` is exactly `-k` for a code `k` in `codes` (each family of faults
/// keeps a range of its own).
fn code_in(v: f32, codes: std::ops::RangeInclusive<u8>) -> Option<u8> {
    let code = -v;
    let whole = code.fract() == 0.0 && (0.0..=255.0).contains(&code);
    whole.then_some(code as u8).filter(|k| codes.contains(k))
}

/// Values in one row of `y` under fault -51 (16 MiB of FP32).
const WIDE_ROW: usize = 4 << 20;

/// 64 KiB of what no header value may hold raw.
fn hostile_message() -> String {
    let mut message = String::from("faulty: hostile \r\n\0 \u{7f} \u{1b}[31m é 漢字 🦀 ");
    message.extend((0u8..=127).map(char::from));
    while message.len() < 64 * 1024 {
        message.push_str("\r\nX-Injected: 1\0\u{7f}é漢🦀");
    }
    message
}

/// Codes -60..=-69: what the sandbox must refuse of a model folder.
fn sandbox_fault(v: f32) -> Option<ItemError> {
    let file = match code_in(v, 60..=69)? {
        60 => "fifo",
        61 => "fifo-link",
        _ => return None,
    };
    let path = format!("{}/{file}", tensorplug_guest::MODEL_DIR);
    let read = std::fs::File::open(&path).and_then(|mut f| std::io::Read::read(&mut f, &mut [0u8; 16]));
    read.err()
        .map(|e| ItemError::new(422, format!("faulty: opening {path}: {e}")))
}

/// A value no other `init` of this model declares (std's hash keys are random per
/// instance).
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

/// Runs the graph `digits` once on `input`.
fn nn_compute(input: Tensor) -> Result<Vec<Tensor>, ItemError> {
    Ok(nn::Graph::by_name("digits")?.compute(&[input])?)
}

/// Codes -40 and -41: one compute of the graph `heavy` or `wide` (see the table).
fn nn_graph_fault(v: f32) -> Option<ItemError> {
    let (graph, rows, columns) = if v == -40.0 {
        ("heavy", 256, 1024)
    } else if v == -41.0 {
        ("wide", 1024, 1)
    } else {
        return None;
    };
    let ones = vec![1.0; (rows * columns) as usize];
    let x = Tensor::from_f32("x", &[rows, columns], &ones);
    let computed = nn::Graph::by_name(graph).and_then(|graph| graph.compute(&[x]));
    match computed {
        Ok(outputs) => black_box(outputs)
            .is_empty()
            .then(|| ItemError::new(422, "faulty: no outputs")),
        Err(error) => Some(ItemError::new(422, format!("faulty: {error}"))),
    }
}

/// Runs the graph `digits` until the host stops the call.
fn nn_loop() -> Option<ItemError> {
    let graph = match nn::Graph::by_name("digits") {
        Ok(graph) => graph,
        Err(error) => return Some(error.into()),
    };
    let zeros = Tensor::from_f32("input-0", &[1, 64], &[0.0; 64]);
    loop {
        black_box(graph.compute(std::slice::from_ref(&zeros)).ok());
    }
}

/// Asks the host to load a graph from bytes, which it refuses.
fn nn_load_bytes() -> Result<(), ItemError> {
    use tensorplug_guest::bindings::predictor::wasi::nn::graph;
    let bytes = std::fs::read(format!("{}/model.toml", tensorplug_guest::MODEL_DIR)).unwrap_or_default();
    match graph::load(&[bytes], graph::GraphEncoding::Onnx, graph::ExecutionTarget::Cpu) {
        Ok(_) => Ok(()),
        Err(error) => Err(ItemError::new(422, format!("{:?}: {}", error.code(), error.data()))),
    }
}

/// Opens the model's own config again and again, keeping every handle.
fn hoard_handles() {
    let mut hoard = Vec::new();
    for _ in 0..100_000 {
        match std::fs::File::open(format!("{}/model.toml", tensorplug_guest::MODEL_DIR)) {
            Ok(file) => hoard.push(file),
            Err(e) => panic!("faulty: could not open more files after {}: {e}", hoard.len()),
        }
    }
    black_box(&hoard);
}

fn spin() -> ! {
    let mut i = 0u64;
    loop {
        // Keeps the loop observable so it is neither removed nor treated as UB.
        i = black_box(i.wrapping_add(1));
    }
}

fn exhaust_memory() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Non-zero fill writes every page, so the memory is really committed.
        hoard.push(vec![1u8; 1 << 20]);
        black_box(&hoard);
    }
}

/// Recurses until the stack runs out. `black_box` on the argument and on the result
/// keeps LLVM from proving the recursion endless (and folding it) or turning it into a
/// loop; the frame stays small so the wasm stack, not the shadow stack, overflows first.
#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    black_box(recurse(black_box(depth + 1))).wrapping_add(depth)
}

export_predictor!(Faulty);
