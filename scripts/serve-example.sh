#!/usr/bin/env bash
# Builds the example plugins, makes the minilm example's graph and tokenizer
# (scripts/minilm.sh), fetches ONNX Runtime's library (scripts/onnxruntime.sh; minilm's
# graph runs on it), and serves the example repository (examples/models) on port 8080
# (REST) and 8081 (gRPC). Extra arguments go to `tensorplug serve` (e.g. --http-port 9000).
#
# The server's release build runs beside the rest: its last minutes (the tensorplug crate
# and its link-time optimisation) keep one core busy, which the plugin toolchains' installs
# and builds use meanwhile (cargo locks each profile's folder, so the two builds share the
# target folder without waiting on each other).
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
[[ -n "$target_dir" ]] || { echo "serve-example: no target_directory in cargo metadata" >&2; exit 1; }
mkdir -p "$target_dir"
server_log="$target_dir/serve-example-server-build.log"
echo "serve-example: building the server in the background (log: $server_log)"
cargo build --release -p tensorplug >"$server_log" 2>&1 &
server_build=$!
# Whatever ends this script early, the background build goes with it.
trap 'kill "$server_build" 2>/dev/null || true' EXIT

./scripts/build-plugins.sh
./scripts/minilm.sh >/dev/null
onnxruntime_lib="$(./scripts/onnxruntime.sh | tail -n 1)"

echo "serve-example: plugins ready; waiting for the server's build"
if ! wait "$server_build"; then
    cat "$server_log" >&2
    echo "serve-example: the server's build failed (above)" >&2
    exit 1
fi
trap - EXIT
exec "$target_dir/release/tensorplug" serve examples/models --onnxruntime-lib "$onnxruntime_lib" "$@"
