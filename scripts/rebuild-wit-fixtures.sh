#!/usr/bin/env bash
# Rebuilds the plugins built against released WIT versions that tests/e2e/compat.rs serves
# (not run by the tests; the outputs are committed):
#   tests/fixtures/wit-0.1.0/digits-predict.wasm   examples/digits/predict at 2f1c36a
#                                                  (tensorplug:plugin@0.1.0)
# Each is built from this repository's own history, in a temporary git worktree with its
# own target directory, offline, with that commit's Cargo.lock and plugin profile.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# commit, package, artifact, destination
fixtures=(
    "2f1c36a digits-predict digits_predict.wasm tests/fixtures/wit-0.1.0/digits-predict.wasm"
)

work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
# The same per-target flags that commit's scripts/build-plugins.sh used.
export CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS="-C target-feature=+simd128"

for fixture in "${fixtures[@]}"; do
    read -r commit package artifact dest <<<"$fixture"
    git worktree remove --force "$work/src" >/dev/null 2>&1 || true
    git worktree add --detach "$work/src" "$commit" >/dev/null
    (cd "$work/src" && CARGO_TARGET_DIR="$work/target-$commit" \
        cargo build --offline --locked --profile plugin --target wasm32-wasip2 -p "$package")
    mkdir -p "$(dirname "$dest")"
    cp "$work/target-$commit/wasm32-wasip2/plugin/$artifact" "$dest"
    printf '%-48s %8d bytes (from %s)\n' "$dest" "$(wc -c <"$dest")" "$commit"
done
