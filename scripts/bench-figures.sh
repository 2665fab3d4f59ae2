#!/usr/bin/env bash
# Every plot of docs/performance.md, measured and drawn again on this machine:
#   1. scripts/bench-floor.sh, REST and gRPC at concurrency 1, 4, 16 and 64, tensorplug and
#      the floor alternating run by run, every run appended to
#      <target>/bench-figures/floor.jsonl (a fresh file each time);
#   2. cargo bench -p tensorplug --bench forward (criterion writes <target>/criterion);
#   3. scripts/plot-performance.py draws docs/performance/*.svg from both, naming this
#      machine, the date, the commit and the commands in each figure's footer.
# Takes about 20 minutes on 2 cores, more if the release build is not up to date: the load
# is BENCH_ROUNDS x 2 protocols x 4 concurrencies x 2 servers x (BENCH_SECONDS + warm-up),
# 5 minutes by default, and the forward benchmark 10-15. Commit the SVGs it writes.
#
# Works from any directory. Environment: BENCH_SECONDS, BENCH_WARMUP, BENCH_ROUNDS,
# BENCH_CONCURRENCY (here "1 4 16 64") and BENCH_PROTOCOLS (here "rest grpc") as
# scripts/bench-floor.sh reads them; CRITERION_HOME as criterion reads it;
# BENCH_FIGURES_OUT, the folder of the SVGs (default docs/performance). BENCH_BASELINE and
# BENCH_BASELINE_FLOOR reach bench-floor.sh too: its table then compares the builds, while
# the figures draw tensorplug and the floor only.
set -euo pipefail
script=bench-figures
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/lib/plugins.sh

concurrencies="${BENCH_CONCURRENCY:-1 4 16 64}"
protocols="${BENCH_PROTOCOLS:-rest grpc}"
out="${BENCH_FIGURES_OUT:-docs/performance}"
criterion="${CRITERION_HOME:-$target_dir/criterion}"
floor_runs="$target_dir/bench-figures/floor.jsonl"

# Named before the load, so the footer says when the data was measured.
cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
memory="$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
machine="$(nproc) CPUs, ${cpu:-CPU model unknown}, $memory RAM, $(uname -sr); $(date -u '+%Y-%m-%d %H:%M UTC')"
commit="$(git describe --always --dirty 2>/dev/null || echo "no git")"

mkdir -p "$(dirname "$floor_runs")"
rm -f "$floor_runs"
BENCH_CONCURRENCY="$concurrencies" BENCH_PROTOCOLS="$protocols" BENCH_OUTPUT="$floor_runs" \
    ./scripts/bench-floor.sh
[[ -s "$floor_runs" ]] || fail "scripts/bench-floor.sh wrote no runs to $floor_runs"

./scripts/build-plugins.sh >&2
cargo bench -p tensorplug --bench forward

python3 scripts/plot-performance.py \
    --floor "$floor_runs" \
    --servers tensorplug,floor \
    --floor-command "BENCH_CONCURRENCY=\"$concurrencies\" BENCH_PROTOCOLS=\"$protocols\" BENCH_SECONDS=${BENCH_SECONDS:-5} BENCH_ROUNDS=${BENCH_ROUNDS:-3} scripts/bench-floor.sh, release build of $commit" \
    --criterion "$criterion" \
    --groups '^(digits|digits_cnn|tiny_resnet)$' \
    --criterion-command "cargo bench -p tensorplug --bench forward, $commit" \
    --out "$out" \
    --machine "$machine"
