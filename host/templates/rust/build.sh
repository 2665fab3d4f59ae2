#!/usr/bin/env bash
# Builds the plugin into the model folder models/{{name}}/ (needs
# `rustup target add wasm32-wasip2` once). CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cargo build --profile plugin --workspace
out="${CARGO_TARGET_DIR:-target}/wasm32-wasip2/plugin"
for built in {{artifacts}}; do
    cp "$out/${built%%:*}.wasm" "models/{{name}}/${built#*:}.wasm"
    echo "built models/{{name}}/${built#*:}.wasm"
done
