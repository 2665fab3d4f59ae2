#!/usr/bin/env bash
# Builds the example plugins and serves the example repository (examples/models) on
# port 8080. Extra arguments go to `tensorplug serve` (e.g. --http-port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-plugins.sh
exec cargo run --release -p tensorplug -- serve examples/models "$@"
