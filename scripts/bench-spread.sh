#!/usr/bin/env bash
# Past one node: three replicas serving N tenants' models on demand behind HAProxy, which
# routes by a consistent hash of /v2/models/<name> (`balance uri path-only depth 3`,
# `hash-type consistent`), so that each keeps only its share of the tenants resident;
# a rolling update under Zipf traffic, then the same traffic round-robin for comparison
# (scripts/bench-spread.py says what it measures, and its settings: BENCH_MODELS,
# BENCH_BUDGET_MIB, BENCH_CONCURRENCY, BENCH_SECONDS, ...). Builds the plugins and the
# release binaries first (scripts/bench-common.sh) and installs HAProxy when missing
# (scripts/toolchains.sh balancer). Everything listens on 127.0.0.1 only.
#
#   ./scripts/bench-spread.sh                                           # 1,000 digits models, 3 replicas
#   BENCH_MODELS=100 BENCH_SECONDS=15 BENCH_RR_SECONDS=0 ./scripts/bench-spread.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/bench-common.sh
./scripts/toolchains.sh balancer >/dev/null
command -v haproxy >/dev/null 2>&1 || { echo "bench-spread: haproxy is missing: install it with ./scripts/toolchains.sh balancer" >&2; exit 1; }
python3 scripts/bench-spread.py --server "$server" --loadgen "$loadgen" --work "$work"
