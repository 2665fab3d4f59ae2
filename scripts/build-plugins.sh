#!/usr/bin/env bash
# Builds the example and test plugins as WebAssembly components and copies them into
# their model folders:
#   examples/digits/{preprocess,predict,postprocess} -> examples/models/digits/*.wasm
#   examples/faulty                                  -> tests/models/faulty/predict.wasm
#   examples/faulty, as a wasm32-wasip1 core module  -> tests/models/faulty-p1/predict.wasm
#   examples/faulty-pre + examples/faulty             -> tests/models/faulty-pipeline/
# Works from any directory. Extra arguments go to `cargo build` (e.g. --locked).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# RUSTUP_AUTO_INSTALL=0 on our machines: targets must be added explicitly. wasip1 is
# for authors who build core modules (the host adapts them at load time).
rustup target add wasm32-wasip2 wasm32-wasip1 >/dev/null 2>&1 ||
    rustup target add wasm32-wasip2 wasm32-wasip1

# simd128 is what makes the numeric plugins fast (~4x on the digits MLP). Set per target
# rather than RUSTFLAGS so host-side build scripts and proc macros are unaffected; a
# `.cargo/config.toml` under examples/ would be ignored when building from the root.
simd="-C target-feature=+simd128"
export CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS="${CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS:-} $simd"
export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="${CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS:-} $simd"

cargo build --profile plugin --target wasm32-wasip2 \
    -p digits-preprocess -p digits-predict -p digits-postprocess -p faulty -p faulty-pre "$@"

# One plugin as a wasm32-wasip1 core module, which the host turns into a component at
# load time (tests/models/faulty-p1).
cargo build --profile plugin --target wasm32-wasip1 -p faulty "$@"

out="target/wasm32-wasip2/plugin"
copy() {
    local artifact="$out/$1" dest="$2"
    mkdir -p "$(dirname "$dest")"
    cp "$artifact" "$dest"
    printf '%-40s %8d bytes\n' "$dest" "$(wc -c <"$dest")"
}
copy digits_preprocess.wasm examples/models/digits/preprocess.wasm
copy digits_predict.wasm examples/models/digits/predict.wasm
copy digits_postprocess.wasm examples/models/digits/postprocess.wasm
copy faulty.wasm tests/models/faulty/predict.wasm
copy faulty.wasm tests/models/faulty-pipeline/predict.wasm
copy faulty_pre.wasm tests/models/faulty-pipeline/preprocess.wasm
out="target/wasm32-wasip1/plugin"
copy faulty.wasm tests/models/faulty-p1/predict.wasm
