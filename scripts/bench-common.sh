# Shared by the benchmark scripts (sourced, not run): builds the plugins and the release
# binaries, makes minilm's graph, sets `server`, `loadgen`, `floor`, `onnxruntime_lib` and a
# temporary `work` folder, stops the server whose
# pid is in `server_pid` and removes `work` on exit, and offers `free_port`.

./scripts/build-plugins.sh >&2
# The example repository's minilm: its graph, and the ONNX Runtime library it runs on
# (`--onnxruntime-lib "$onnxruntime_lib"` for a server of examples/models).
./scripts/minilm.sh >/dev/null
onnxruntime_lib="$(./scripts/onnxruntime.sh | tail -n 1)"
cargo build --release -p tensorplug -p tensorplug-loadgen -p tensorplug-floor >&2

# The release binaries are in the workspace's target folder as cargo sees it
# (CARGO_TARGET_DIR, then `build.target-dir` in a config file, then target/), the same
# folder build-plugins.sh builds the plugins into.
target_dir="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
[[ -n "$target_dir" ]] || { echo "bench: no target_directory in cargo metadata" >&2; exit 1; }
server="$target_dir/release/tensorplug"
loadgen="$target_dir/release/tensorplug-loadgen"
floor="$target_dir/release/tensorplug-floor"

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# A TCP port on 127.0.0.1 that is free right now.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
