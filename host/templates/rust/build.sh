#!/usr/bin/env bash
# Builds the {{stage}} stage into the model folder models/{{name}}/ (needs
# `rustup target add wasm32-wasip2` once). CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cargo build --profile plugin
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/plugin/{{crate}}.wasm" models/{{name}}/{{stage}}.wasm
echo "built models/{{name}}/{{stage}}.wasm"
