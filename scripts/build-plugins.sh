#!/usr/bin/env bash
# Builds the example and test plugins as WebAssembly components and copies them into
# their model folders:
#   examples/digits/{preprocess,predict,postprocess} -> examples/models/digits/*.wasm
#   examples/digits-onnx/predict (+ digits' pre/postprocess) -> examples/models/digits-onnx/*.wasm
#     and the same three                     -> examples/models/digits-cnn/*.wasm
#   examples/digits-onnx/predict                   -> examples/models/tiny-resnet/predict.wasm
#   examples/text-embedding/{tokenize,embed}       -> examples/models/minilm/{preprocess,predict}.wasm
#     (its minilm.onnx and tokenizer.json are not built here: scripts/minilm.sh writes them)
#   digits' pre/postprocess                  -> examples/models/digits-{c,cpp,python,js}/*.wasm
#     (whose predict, in C, C++, Python and JavaScript, scripts/build-c-plugins.sh,
#     build-python-plugins.sh and build-js-plugins.sh build, called last; they also build
#     the three stages of examples/models/digits-mixed and the test plugins in those
#     languages)
#   tests/plugins/faulty                             -> tests/models/faulty/predict.wasm
#   tests/plugins/faulty, as a wasm32-wasip1 core module -> tests/models/faulty-p1/predict.wasm
#   tests/plugins/faulty-pre + tests/plugins/faulty  -> tests/models/faulty-pipeline/
#   examples/text-embedding/tokenize + tests/plugins/echo -> tests/fixtures/minilm-tokens/
#     (no tokenizer.json there: the test copies the example's in)
# The plugins are their own workspace (examples/Cargo.toml, whose members include the test
# plugins in tests/plugins/), built into the root workspace's target folder
# (CARGO_TARGET_DIR or cargo's configured one, else target/).
# Works from any directory. Extra arguments go to `cargo build` (e.g. --locked).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# RUSTUP_AUTO_INSTALL=0 on our machines: targets must be added explicitly. wasip1 is
# for authors who build core modules (the host adapts them at load time).
rustup target add wasm32-wasip2 wasm32-wasip1 >/dev/null 2>&1 ||
    rustup target add wasm32-wasip2 wasm32-wasip1

# The root workspace's target folder, as cargo sees it (CARGO_TARGET_DIR, then
# `build.target-dir` in a config file, then target/); the plugin workspace builds there too.
target_dir="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
[[ -n "$target_dir" ]] || { echo "build-plugins: no target_directory in cargo metadata" >&2; exit 1; }
export CARGO_TARGET_DIR="$target_dir"

# simd128 is what makes the numeric plugins fast (~4x on the digits MLP). It is set per
# target (so host-side build scripts and proc macros are unaffected) in
# examples/.cargo/config.toml, which cargo reads because it runs in examples/.
cd examples
cargo build --profile plugin --target wasm32-wasip2 \
    -p digits-preprocess -p digits-predict -p digits-postprocess -p digits-onnx-predict -p faulty -p faulty-pre \
    -p text-embedding-tokenize -p text-embedding-embed -p echo "$@"

# One plugin as a wasm32-wasip1 core module, which the host turns into a component at
# load time (tests/models/faulty-p1).
cargo build --profile plugin --target wasm32-wasip1 -p faulty "$@"
cd "$root"

out="$target_dir/wasm32-wasip2/plugin"
copy() {
    local artifact="$out/$1" dest="$2"
    mkdir -p "$(dirname "$dest")"
    cp "$artifact" "$dest"
    printf '%-40s %8d bytes\n' "$dest" "$(wc -c <"$dest")"
}
copy digits_preprocess.wasm examples/models/digits/preprocess.wasm
copy digits_predict.wasm examples/models/digits/predict.wasm
copy digits_postprocess.wasm examples/models/digits/postprocess.wasm
copy digits_onnx_predict.wasm examples/models/digits-onnx/predict.wasm
copy digits_preprocess.wasm examples/models/digits-onnx/preprocess.wasm
copy digits_postprocess.wasm examples/models/digits-onnx/postprocess.wasm
copy digits_onnx_predict.wasm examples/models/digits-cnn/predict.wasm
copy digits_preprocess.wasm examples/models/digits-cnn/preprocess.wasm
copy digits_postprocess.wasm examples/models/digits-cnn/postprocess.wasm
copy digits_onnx_predict.wasm examples/models/tiny-resnet/predict.wasm
copy digits_preprocess.wasm examples/models/digits-c/preprocess.wasm
copy digits_postprocess.wasm examples/models/digits-c/postprocess.wasm
copy digits_preprocess.wasm examples/models/digits-cpp/preprocess.wasm
copy digits_postprocess.wasm examples/models/digits-cpp/postprocess.wasm
for language in python js; do
    copy digits_preprocess.wasm "examples/models/digits-$language/preprocess.wasm"
    copy digits_postprocess.wasm "examples/models/digits-$language/postprocess.wasm"
done
copy text_embedding_tokenize.wasm examples/models/minilm/preprocess.wasm
copy text_embedding_embed.wasm examples/models/minilm/predict.wasm
copy faulty.wasm tests/models/faulty/predict.wasm
copy faulty.wasm tests/models/faulty-pipeline/predict.wasm
copy faulty_pre.wasm tests/models/faulty-pipeline/preprocess.wasm
copy text_embedding_tokenize.wasm tests/fixtures/minilm-tokens/preprocess.wasm
copy echo.wasm tests/fixtures/minilm-tokens/predict.wasm
out="$target_dir/wasm32-wasip1/plugin"
copy faulty.wasm tests/models/faulty-p1/predict.wasm

# The C, C++, Python and JavaScript plugins, with their toolchains (scripts/toolchains.sh:
# pinned, installed once; about a second when they are there already). Only the plugin
# toolchains: serving needs none of the tests' container, load-balancer or broker tools.
./scripts/toolchains.sh c cpp python js >/dev/null
./scripts/build-c-plugins.sh
./scripts/build-python-plugins.sh
./scripts/build-js-plugins.sh
