#!/usr/bin/env bash
# Many models on one node: N tenants' models served on demand under a memory budget
# (scripts/bench-density.py says what it measures, and its settings: BENCH_MODELS,
# BENCH_BUDGET_MIB, BENCH_CONCURRENCY, BENCH_SECONDS, ...). Builds the plugins and the
# release binaries first (scripts/bench-common.sh). Load goes to 127.0.0.1 only.
#
#   ./scripts/bench-density.sh                                          # 10,000 Rust digits models
#   BENCH_EXAMPLE=digits-python BENCH_MODELS=100 BENCH_BUDGET_MIB=1536 \
#     BENCH_CONCURRENCY=16 ./scripts/bench-density.sh                   # 100 Python ones
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/bench-common.sh
python3 scripts/bench-density.py --server "$server" --loadgen "$loadgen" --work "$work"
