//! The forward pass of the digits classifier: a 64-64-10 multi-layer perceptron
//! (scikit-learn `MLPClassifier`, ReLU hidden layer, softmax output) over 8x8 images with
//! raw pixel values 0..16.
//!
//! Pure Rust without dependencies, so the same code runs inside the `digits-predict`
//! plugin and natively in the host's benchmarks. Layers are fixed-size arrays and the
//! inner loops run over contiguous output rows, which lets LLVM vectorise them (SSE on
//! x86_64, simd128 on wasm32 when built with `-C target-feature=+simd128`).

use std::fmt;
use std::path::Path;

/// Pixels per image (8x8).
pub const INPUTS: usize = 64;
/// Hidden units.
pub const HIDDEN: usize = 64;
/// Classes (the digits 0..9).
pub const CLASSES: usize = 10;

/// The weight files of a model folder, in the argument order of [`Weights::from_bytes`].
pub const WEIGHT_FILES: [&str; 4] = ["W0.f32", "b0.f32", "W1.f32", "b1.f32"];

/// The model's parameters: little-endian `f32`, row-major, as in the model folder.
#[derive(Clone, PartialEq)]
pub struct Weights {
    w0: Box<[[f32; HIDDEN]; INPUTS]>,
    b0: [f32; HIDDEN],
    /// Rows padded from 10 to [`BLOCK`] columns with zeros, so the output layer is whole
    /// vectors too.
    w1: Box<[[f32; BLOCK]; HIDDEN]>,
    b1: [f32; BLOCK],
}

/// Accumulator width: 16 floats, four 128-bit vectors. The kernels keep one block of
/// outputs in registers while walking the inputs, which suits LLVM and Cranelift alike.
const BLOCK: usize = 16;

/// Inputs handled per turn of the hidden layer's loop.
const UNROLL: usize = 4;

/// Why weights could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsError(String);

impl fmt::Display for WeightsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WeightsError {}

impl fmt::Debug for Weights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Weights({INPUTS}x{HIDDEN}x{CLASSES})")
    }
}

impl Weights {
    /// Builds the weights from the contents of `W0.f32` (`[64, 64]`), `b0.f32` (`[64]`),
    /// `W1.f32` (`[64, 10]`) and `b1.f32` (`[10]`).
    ///
    /// # Errors
    /// When a buffer does not have exactly the size of its tensor.
    pub fn from_bytes(w0: &[u8], b0: &[u8], w1: &[u8], b1: &[u8]) -> Result<Self, WeightsError> {
        let mut weights = Weights {
            w0: Box::new([[0.0; HIDDEN]; INPUTS]),
            b0: [0.0; HIDDEN],
            w1: Box::new([[0.0; BLOCK]; HIDDEN]),
            b1: [0.0; BLOCK],
        };
        fill("W0.f32", w0, weights.w0.as_flattened_mut())?;
        fill("b0.f32", b0, &mut weights.b0)?;
        let mut w1_dense = [0.0; HIDDEN * CLASSES];
        fill("W1.f32", w1, &mut w1_dense)?;
        for (padded, dense) in weights.w1.iter_mut().zip(w1_dense.chunks_exact(CLASSES)) {
            padded[..CLASSES].copy_from_slice(dense);
        }
        fill("b1.f32", b1, &mut weights.b1[..CLASSES])?;
        Ok(weights)
    }

    /// Reads [`WEIGHT_FILES`] from `dir` (inside the plugin: `/model`).
    ///
    /// # Errors
    /// When a file cannot be read or has the wrong size.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, WeightsError> {
        let read = |name: &str| {
            let path = dir.as_ref().join(name);
            std::fs::read(&path).map_err(|e| WeightsError(format!("cannot read {}: {e}", path.display())))
        };
        let [w0, b0, w1, b1] = WEIGHT_FILES;
        Self::from_bytes(&read(w0)?, &read(b0)?, &read(w1)?, &read(b1)?)
    }
}

fn fill(file: &str, bytes: &[u8], out: &mut [f32]) -> Result<(), WeightsError> {
    let expected = size_of_val(out);
    if bytes.len() != expected {
        return Err(WeightsError(format!(
            "{file}: expected {expected} bytes ({} little-endian f32), got {}",
            out.len(),
            bytes.len()
        )));
    }
    for (value, chunk) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *value = f32::from_le_bytes(chunk.try_into().expect("chunks of 4"));
    }
    Ok(())
}

/// Classifies `n` images: `x` is `[n, 64]` raw pixels; writes the class probabilities
/// (`[n, 10]`, softmax) into `proba` and the most probable class of each image into
/// `labels`.
///
/// # Panics
/// When a slice's length does not match `n`.
pub fn forward(weights: &Weights, x: &[f32], n: usize, proba: &mut [f32], labels: &mut [i64]) {
    assert_eq!(x.len(), n * INPUTS, "x must be [n, {INPUTS}]");
    assert_eq!(proba.len(), n * CLASSES, "proba must be [n, {CLASSES}]");
    assert_eq!(labels.len(), n, "labels must be [n]");
    let rows = x
        .chunks_exact(INPUTS)
        .zip(proba.chunks_exact_mut(CLASSES))
        .zip(labels.iter_mut());
    for ((x, p), label) in rows {
        *label = classify(weights, &hidden(weights, image(x)), p);
    }
}

/// `relu(x @ W0 + b0) @ W1 + b1` for one image.
fn image(x: &[f32]) -> &[f32; INPUTS] {
    x.try_into().expect("chunks of INPUTS")
}

/// The hidden layer (before ReLU) of one image.
fn hidden(weights: &Weights, x: &[f32; INPUTS]) -> [f32; HIDDEN] {
    // One block of 16 units at a time: the block's sums stay in registers while each
    // input scales the matching 16 weights of its row. Each sum still adds the inputs in
    // order, so results do not depend on the blocking. (Two images per pass, sharing
    // each weight load, measured slower inside the sandbox.)
    let mut h = [0.0f32; HIDDEN];
    for (block, out) in h.chunks_exact_mut(BLOCK).enumerate() {
        let columns = block * BLOCK;
        let mut acc: [f32; BLOCK] = weights.b0[columns..][..BLOCK]
            .try_into()
            .expect("HIDDEN is whole blocks");
        // Four inputs per loop turn: a sandbox checks its deadline once per turn, and
        // short turns would spend a large share of their time on that check.
        for (xs, rows) in x.chunks_exact(UNROLL).zip(weights.w0.chunks_exact(UNROLL)) {
            for (&xk, row) in xs.iter().zip(rows) {
                let w: &[f32; BLOCK] = row[columns..][..BLOCK].try_into().expect("HIDDEN is whole blocks");
                for j in 0..BLOCK {
                    acc[j] += xk * w[j];
                }
            }
        }
        out.copy_from_slice(&acc);
    }
    h
}

/// Output layer, softmax and argmax of one image's hidden layer.
fn classify(weights: &Weights, h: &[f32; HIDDEN], p: &mut [f32]) -> i64 {
    // The 10 classes padded to one block.
    let mut z = weights.b1;
    for (&hk, row) in h.iter().zip(weights.w1.iter()) {
        // ReLU as a comparison: `f32::max` is no single wasm instruction (its NaN rule
        // differs from `f32.max`'s), so in a plugin it was a call to `fmaxf` per hidden
        // unit, 9 % of the forward pass. A NaN unit gives 0 either way.
        let hk = if hk > 0.0 { hk } else { 0.0 };
        for (zj, &w) in z.iter_mut().zip(row) {
            *zj += hk * w;
        }
    }
    let z: &[f32; CLASSES] = z[..CLASSES].try_into().expect("CLASSES <= BLOCK");
    let p: &mut [f32; CLASSES] = p.try_into().expect("chunks of CLASSES");
    softmax(z, p) as i64
}

/// Writes `softmax(z)` into `p` and returns the index of the largest logit (the first
/// one on ties, like numpy's argmax).
fn softmax(z: &[f32; CLASSES], p: &mut [f32; CLASSES]) -> usize {
    let mut best = 0;
    for (j, &v) in z.iter().enumerate() {
        if v > z[best] {
            best = j;
        }
    }
    // Subtracting the maximum keeps exp() from overflowing without changing the result.
    let max = z[best];
    let mut sum = 0.0;
    for (pj, &zj) in p.iter_mut().zip(z) {
        *pj = (zj - max).exp();
        sum += *pj;
    }
    for pj in p.iter_mut() {
        *pj /= sum;
    }
    best
}

#[cfg(test)]
mod tests;
