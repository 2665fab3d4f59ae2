#!/usr/bin/env bash
# Builds the example plugins, makes the minilm example's graph and tokenizer
# (scripts/minilm.sh), fetches ONNX Runtime's library (scripts/onnxruntime.sh; minilm's
# graph runs on it), and serves the example repository (examples/models) on port 8080
# (REST) and 8081 (gRPC). Extra arguments go to `tensorplug serve` (e.g. --http-port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-plugins.sh
./scripts/minilm.sh >/dev/null
onnxruntime_lib="$(./scripts/onnxruntime.sh | tail -n 1)"
exec cargo run --release -p tensorplug -- serve examples/models --onnxruntime-lib "$onnxruntime_lib" "$@"
