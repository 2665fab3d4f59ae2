#!/usr/bin/env bash
# Load benchmark: serves the digits model (examples/models/digits) with the release build
# on 127.0.0.1 and loads it with tools/loadgen (closed loop, one keep-alive connection per
# client, bodies from tests/data/digits/test_requests.jsonl) at concurrency 1, 16 and 64,
# with dynamic batching ON (the model as shipped) and OFF (max_batch_size = 1,
# max_queue_delay_us = 0). Prints a markdown table, then the CPU each side used.
#
# Targets, on a 2-core machine with the load generator on the same machine:
#   concurrency 64, batching on: >= 15,000 requests/s and p99 <= 5 ms.
#
# Works from any directory. Environment:
#   BENCH_SECONDS      measured seconds per run (default 10)
#   BENCH_WARMUP       warm-up per run, not counted (default 2s)
#   BENCH_CONCURRENCY  the concurrencies to run (default "1 16 64")
#   LOADGEN_THREADS    the load generator's worker threads (default 1)
# "mean batch" is items/batches from the model's stats endpoint over the run (warm-up
# included); "errors" counts non-2xx answers and transport errors.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${BENCH_SECONDS:-10}"
warmup="${BENCH_WARMUP:-2s}"
concurrencies="${BENCH_CONCURRENCY:-1 16 64}"
threads="${LOADGEN_THREADS:-1}"

source scripts/bench-common.sh

bodies="$root/tests/data/digits/test_requests.jsonl"
clk_tck="$(getconf CLK_TCK)"

# A model repository holding a copy of the digits model, batching on or off.
make_repo() {
    local mode="$1" repo="$work/repo-$1"
    mkdir -p "$repo"
    cp -R examples/models/digits "$repo/digits"
    if [[ "$mode" == off ]]; then
        sed -i -e 's/^max_batch_size *=.*/max_batch_size = 1/' \
            -e 's/^max_queue_delay_us *=.*/max_queue_delay_us = 0/' "$repo/digits/model.toml"
        grep -q '^max_batch_size = 1$' "$repo/digits/model.toml" &&
            grep -q '^max_queue_delay_us = 0$' "$repo/digits/model.toml" ||
            { echo "bench-load: could not turn batching off in model.toml" >&2; exit 1; }
    fi
    echo "$repo"
}

# Starts the server on a free port (sets server_pid, base, server_log); waits until ready.
start_server() {
    local repo="$1" mode="$2"
    server_log="$work/server-$mode.log"
    base="http://127.0.0.1:$(free_port)"
    "$server" serve "$repo" --host 127.0.0.1 --http-port "${base##*:}" --log warn \
        --shutdown-grace-secs 5 >"$server_log" 2>&1 &
    server_pid=$!
    local deadline=$((SECONDS + 120))
    until [[ "$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$base/v2/health/ready" || true)" == 200 ]]; do
        if ! kill -0 "$server_pid" 2>/dev/null; then
            echo "bench-load: the server exited before it was ready:" >&2
            cat "$server_log" >&2
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "bench-load: the server was not ready after 120 s:" >&2
            cat "$server_log" >&2
            exit 1
        fi
        sleep 0.2
    done
}

stop_server() {
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

server_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }

rows="$work/rows"
cpu_rows="$work/cpu_rows"
errors_seen="$work/errors"
: >"$rows"
: >"$cpu_rows"
: >"$errors_seen"

for mode in on off; do
    repo="$(make_repo "$mode")"
    start_server "$repo" "$mode"
    echo "bench-load: batching $mode, server pid $server_pid at $base" >&2
    for c in $concurrencies; do
        run="$work/$mode-$c"
        curl -sf "$base/v2/models/digits/stats" >"$run.stats0"
        ticks0="$(server_ticks)"
        times >"$run.times0"
        wall0="$(date +%s.%N)"
        "$loadgen" "$base/v2/models/digits/infer" --concurrency "$c" --duration "${seconds}s" \
            --warmup "$warmup" --threads "$threads" --body-file "$bodies" --json >"$run.json"
        wall1="$(date +%s.%N)"
        times >"$run.times1"
        ticks1="$(server_ticks)"
        curl -sf "$base/v2/models/digits/stats" >"$run.stats1"

        python3 - "$mode" "$c" "$run" "$ticks0" "$ticks1" "$clk_tck" "$wall0" "$wall1" \
            "$rows" "$cpu_rows" "$errors_seen" <<'EOF'
import json, re, sys
mode, c, run, t0, t1, tck, w0, w1, rows, cpu_rows, errors_seen = sys.argv[1:]
lg = json.load(open(run + ".json"))
def counters(path):
    s = json.load(open(path))["model_stats"][0]["tensorplug"]
    return s["items"], s["batches"]
items0, batches0 = counters(run + ".stats0")
items1, batches1 = counters(run + ".stats1")
batches = batches1 - batches0
mean_batch = f"{(items1 - items0) / batches:.2f}" if batches else "-"
def children_cpu(path):
    # `times`: the shell's user/sys, then its children's user/sys, as e.g. 0m1.250s.
    lines = open(path).read().split("\n")
    return sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", lines[1]))
wall = float(w1) - float(w0)
server_cores = (int(t1) - int(t0)) / int(tck) / wall
loadgen_cores = (children_cpu(run + ".times1") - children_cpu(run + ".times0")) / wall
with open(rows, "a") as f:
    f.write(f"| {mode} | {c} | {lg['rps']:.0f} | {lg['p50_us'] / 1000:.2f} | {lg['p99_us'] / 1000:.2f} "
            f"| {mean_batch} | {lg['errors']} |\n")
with open(cpu_rows, "a") as f:
    f.write(f"| {mode} | {c} | {server_cores:.2f} | {loadgen_cores:.2f} |\n")
if lg["errors"] and lg["first_error"]:
    with open(errors_seen, "a") as f:
        f.write(f"- batching {mode}, concurrency {c}: {lg['errors']} errors, first: {lg['first_error']}\n")
print(f"bench-load: batching {mode} concurrency {c}: {lg['rps']:.0f} req/s, p50 {lg['p50_us']}us, "
      f"p99 {lg['p99_us']}us, mean batch {mean_batch}, errors {lg['errors']}; "
      f"CPU server {server_cores:.2f} cores, loadgen {loadgen_cores:.2f}", file=sys.stderr)
EOF
    done
    stop_server
done

echo
echo "tensorplug load benchmark: digits model, ${seconds}s per run (+ $warmup warm-up), loadgen threads $threads, $(nproc) cores"
echo
echo "| mode | concurrency | requests/s | p50 ms | p99 ms | mean batch | errors |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
cat "$rows"
echo
echo "CPU used during each run (cores busy on average, warm-up included):"
echo
echo "| mode | concurrency | server | loadgen |"
echo "| --- | ---: | ---: | ---: |"
cat "$cpu_rows"
if [[ -s "$errors_seen" ]]; then
    echo
    echo "Errors:"
    cat "$errors_seen"
fi
