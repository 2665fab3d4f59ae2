#!/usr/bin/env bash
# Runs every test of the workspace: builds the example and test plugins (wasm32), then the
# host's unit and end-to-end tests, which serve those plugins over loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-plugins.sh
cargo test --workspace --exclude digits-preprocess --exclude digits-predict --exclude digits-postprocess --exclude faulty --exclude faulty-pre "$@"
