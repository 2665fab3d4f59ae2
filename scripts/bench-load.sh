#!/usr/bin/env bash
# Load benchmark: serves the digits model (examples/models/digits) with the release build
# on 127.0.0.1 and loads it with tools/loadgen (closed loop, one keep-alive connection per
# client, requests from tests/data/digits/test_requests.jsonl) at concurrency 1, 16 and
# 64: REST with dynamic batching ON (the model as shipped) and OFF (max_batch_size = 1,
# max_queue_delay_us = 0), and gRPC ModelInfer against the batching-on server, with typed
# contents (`grpc`) and with raw_input_contents (`grpc-raw`), each gRPC client on its own
# HTTP/2 connection. Prints a markdown table, then the CPU each side used.
#
# Then the floor (tools/floor): the same HTTP and gRPC stack and the same V2 decoder and
# encoder with no model, at the same protocols and concurrencies, and tensorplug's
# requests/s and p99 as a ratio of the floor's, measured in the same run.
#
# Then the cost of observability: the batching-on server at its default settings (no
# --log flag: info logs, metrics on) against the same with `--log off --metrics off`,
# REST at concurrency 64, runs alternating default/off/default/off, and the ratio of the
# means.
#
# Targets, on a 2-core machine with the load generator on the same machine:
#   concurrency 64, batching on: >= 15,000 requests/s and p99 <= 5 ms.
#
# Works from any directory. Environment:
#   BENCH_SECONDS      measured seconds per run (default 10)
#   BENCH_WARMUP       warm-up per run, not counted (default 2s)
#   BENCH_CONCURRENCY  the concurrencies to run (default "1 16 64")
#   BENCH_PROTOCOLS    the protocols to run (default "rest grpc grpc-raw"); batching off
#                      is run for rest only
#   BENCH_OBSERVABILITY_ALL  if set (non-empty), the observability comparison runs at
#                      every concurrency of BENCH_CONCURRENCY instead of 64 only
#   LOADGEN_THREADS    the load generator's worker threads (default 1)
# "mean batch" is items/batches from the model's stats endpoint over the run (warm-up
# included); "errors" counts non-2xx answers, gRPC statuses other than OK, transport
# errors and time-outs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${BENCH_SECONDS:-10}"
warmup="${BENCH_WARMUP:-2s}"
concurrencies="${BENCH_CONCURRENCY:-1 16 64}"
protocols="${BENCH_PROTOCOLS:-rest grpc grpc-raw}"
observability_all="${BENCH_OBSERVABILITY_ALL:-}"
threads="${LOADGEN_THREADS:-1}"

for protocol in $protocols; do
    case "$protocol" in
        rest | grpc | grpc-raw) ;;
        *) echo "bench-load: unknown protocol '$protocol' in BENCH_PROTOCOLS (rest, grpc, grpc-raw)" >&2; exit 1 ;;
    esac
done
[[ -n "${protocols// /}" ]] || { echo "bench-load: BENCH_PROTOCOLS is empty" >&2; exit 1; }

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

# Starts the server on two free ports, REST and gRPC, with the extra flags given (sets
# server_pid, base, grpc_base, server_log); waits until ready.
start_server() {
    local repo="$1" name="$2"
    shift 2
    server_log="$work/server-$name.log"
    local http_port grpc_port
    http_port="$(free_port)"
    grpc_port="$(free_port)"
    while [[ "$grpc_port" == "$http_port" ]]; do grpc_port="$(free_port)"; done
    base="http://127.0.0.1:$http_port"
    grpc_base="http://127.0.0.1:$grpc_port"
    "$server" serve "$repo" --host 127.0.0.1 --http-port "$http_port" --grpc-port "$grpc_port" \
        --shutdown-grace-secs 5 "$@" >"$server_log" 2>&1 &
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

# Runs the load generator once against the running server (writes $2.json).
load() {
    local protocol="$1" out="$2" c="$3"
    local target=("$base/v2/models/digits/infer")
    if [[ "$protocol" != rest ]]; then
        target=("$grpc_base" --protocol "$protocol" --model digits)
    fi
    "$loadgen" "${target[@]}" --concurrency "$c" --duration "${seconds}s" \
        --warmup "$warmup" --threads "$threads" --body-file "$bodies" --json >"$out.json"
}

rows="$work/rows"
cpu_rows="$work/cpu_rows"
errors_seen="$work/errors"
: >"$rows"
: >"$cpu_rows"
: >"$errors_seen"

# One run, measured: loadgen's numbers, the mean batch and the CPU each side used.
measure() {
    local protocol="$1" mode="$2" c="$3"
    local run="$work/$protocol-$mode-$c"
    curl -sf "$base/v2/models/digits/stats" >"$run.stats0"
    local ticks0 ticks1 wall0 wall1
    ticks0="$(server_ticks)"
    times >"$run.times0"
    wall0="$(date +%s.%N)"
    load "$protocol" "$run" "$c"
    wall1="$(date +%s.%N)"
    times >"$run.times1"
    ticks1="$(server_ticks)"
    curl -sf "$base/v2/models/digits/stats" >"$run.stats1"

    python3 - "$protocol" "$mode" "$c" "$run" "$ticks0" "$ticks1" "$clk_tck" "$wall0" "$wall1" \
        "$rows" "$cpu_rows" "$errors_seen" <<'PY'
import json, re, sys
protocol, mode, c, run, t0, t1, tck, w0, w1, rows, cpu_rows, errors_seen = sys.argv[1:]
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
    f.write(f"| {protocol} | {mode} | {c} | {lg['rps']:.0f} | {lg['p50_us'] / 1000:.2f} "
            f"| {lg['p99_us'] / 1000:.2f} | {mean_batch} | {lg['errors']} |\n")
with open(cpu_rows, "a") as f:
    f.write(f"| {protocol} | {mode} | {c} | {server_cores:.2f} | {loadgen_cores:.2f} |\n")
if lg["errors"] and lg["first_error"]:
    with open(errors_seen, "a") as f:
        f.write(f"- {protocol}, batching {mode}, concurrency {c}: {lg['errors']} errors, "
                f"first: {lg['first_error']}\n")
print(f"bench-load: {protocol}, batching {mode}, concurrency {c}: {lg['rps']:.0f} req/s, "
      f"p50 {lg['p50_us']}us, p99 {lg['p99_us']}us, mean batch {mean_batch}, errors {lg['errors']}; "
      f"CPU server {server_cores:.2f} cores, loadgen {loadgen_cores:.2f}", file=sys.stderr)
PY
}

for mode in on off; do
    mode_protocols="$protocols"
    [[ "$mode" == on ]] || mode_protocols="$(tr ' ' '\n' <<<"$protocols" | grep -x rest || true)"
    [[ -n "$mode_protocols" ]] || continue
    repo="$(make_repo "$mode")"
    start_server "$repo" "$mode" --log warn
    echo "bench-load: batching $mode, server pid $server_pid at $base (gRPC $grpc_base)" >&2
    for protocol in $mode_protocols; do
        for c in $concurrencies; do
            measure "$protocol" "$mode" "$c"
        done
    done
    stop_server
done

# The floor: tools/floor on the same HTTP and gRPC stack, decoding each request with
# tensorplug's decoder and encoding an answer of the model's shape with its encoder, with
# no model behind them. Each protocol and concurrency as above; the ratio table below
# puts tensorplug (batching on) beside it.
floor_http="$(free_port)"
floor_grpc="$(free_port)"
while [[ "$floor_grpc" == "$floor_http" ]]; do floor_grpc="$(free_port)"; done
"$floor" examples/models/digits --http-port "$floor_http" --grpc-port "$floor_grpc" >"$work/floor.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$floor_http"
grpc_base="http://127.0.0.1:$floor_grpc"
until [[ "$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$base/v2/health/ready" || true)" == 200 ]]; do
    kill -0 "$server_pid" 2>/dev/null || { echo "bench-load: the floor server exited:" >&2; cat "$work/floor.log" >&2; exit 1; }
    sleep 0.2
done
echo "bench-load: floor server pid $server_pid at $base (gRPC $grpc_base)" >&2
for protocol in $protocols; do
    for c in $concurrencies; do
        load "$protocol" "$work/$protocol-floor-$c" "$c"
        python3 - "$work/$protocol-floor-$c.json" "$protocol" "$c" "$errors_seen" <<'PY' >&2
import json, sys
path, protocol, c, errors_seen = sys.argv[1:]
lg = json.load(open(path))
if lg["errors"] and lg["first_error"]:
    with open(errors_seen, "a") as f:
        f.write(f"- floor {protocol}, concurrency {c}: {lg['errors']} errors, first: {lg['first_error']}\n")
print(f"bench-load: floor {protocol}, concurrency {c}: {lg['rps']:.0f} req/s, p99 {lg['p99_us']}us")
PY
    done
done
stop_server
floor_rows="$work/floor_rows"
python3 - "$work" "$floor_rows" "$protocols" "$concurrencies" <<'PY'
import json, sys
work, rows, protocols, concurrencies = sys.argv[1:]
with open(rows, "w") as f:
    for protocol in protocols.split():
        for c in concurrencies.split():
            t = json.load(open(f"{work}/{protocol}-on-{c}.json"))
            fl = json.load(open(f"{work}/{protocol}-floor-{c}.json"))
            ratio = t["rps"] / fl["rps"] if fl["rps"] else float("nan")
            f.write(f"| {protocol} | {c} | {t['rps']:.0f} | {fl['rps']:.0f} | **{ratio:.2f}** "
                    f"| {t['p99_us'] / 1000:.2f} | {fl['p99_us'] / 1000:.2f} |\n")
PY

# The cost of observability: default settings (A) against logs and metrics off (B).
# (The help is read in full first: `grep -q` on a pipe could end the server with SIGPIPE.)
serve_help="$("$server" serve --help)"
if grep -q -- '--metrics' <<<"$serve_help"; then
    quiet_flags=(--log off --metrics off)
    quiet_note=""
else
    quiet_flags=(--log off)
    quiet_note="This server has no --metrics flag: B is --log off only (metrics stayed on)."
fi
if [[ -n "$observability_all" ]]; then
    observability_concurrencies="$concurrencies"
else
    observability_concurrencies=64
fi
observability_rows="$work/observability_rows"
: >"$observability_rows"
repo="$work/repo-on"
[[ -d "$repo" ]] || repo="$(make_repo on)"
for c in $observability_concurrencies; do
    for round in 1 2; do
        for variant in default quiet; do
            if [[ "$variant" == default ]]; then
                start_server "$repo" "obs-$variant"
            else
                start_server "$repo" "obs-$variant" "${quiet_flags[@]}"
            fi
            out="$work/obs-$c-$variant-$round"
            load rest "$out" "$c"
            stop_server
            python3 - "$out.json" "$variant" "$round" "$c" "$errors_seen" <<'PY' >&2
import json, sys
path, variant, round_, c, errors_seen = sys.argv[1:]
lg = json.load(open(path))
if lg["errors"] and lg["first_error"]:
    with open(errors_seen, "a") as f:
        f.write(f"- observability {variant} run {round_}, concurrency {c}: {lg['errors']} errors, "
                f"first: {lg['first_error']}\n")
print(f"bench-load: observability {variant} run {round_}, concurrency {c}: {lg['rps']:.0f} req/s, "
      f"p50 {lg['p50_us']}us, p99 {lg['p99_us']}us, errors {lg['errors']}")
PY
        done
    done
    python3 - "$work/obs-$c" "$c" "$observability_rows" <<'PY'
import json, sys
prefix, c, rows = sys.argv[1:]
runs = {v: [json.load(open(f"{prefix}-{v}-{r}.json")) for r in (1, 2)] for v in ("default", "quiet")}
def mean(v, key):
    return sum(run[key] for run in runs[v]) / len(runs[v])
a, b = mean("default", "rps"), mean("quiet", "rps")
ratio = f"{b / a:.3f}" if a else "-"
order = " / ".join(f"{runs[v][r]['rps']:.0f}" for r in (0, 1) for v in ("default", "quiet"))
errors = sum(run["errors"] for v in runs for run in runs[v])
with open(rows, "a") as f:
    f.write(f"| {c} | {a:.0f} | {b:.0f} | {ratio} | {mean('default', 'p99_us') / 1000:.2f} "
            f"| {mean('quiet', 'p99_us') / 1000:.2f} | {order} | {errors} |\n")
PY
done

echo
echo "tensorplug load benchmark: digits model, ${seconds}s per run (+ $warmup warm-up), loadgen threads $threads, $(nproc) cores"
echo
echo "| protocol | batching | concurrency | requests/s | p50 ms | p99 ms | mean batch | errors |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
cat "$rows"
echo
echo "tensorplug (batching on) against the floor (tools/floor: the same stack and codec, no model), same run:"
echo
echo "| protocol | concurrency | tensorplug req/s | floor req/s | ratio | tensorplug p99 ms | floor p99 ms |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
cat "$floor_rows"
echo
echo "CPU used during each run (cores busy on average, warm-up included):"
echo
echo "| protocol | batching | concurrency | server | loadgen |"
echo "| --- | --- | ---: | ---: | ---: |"
cat "$cpu_rows"
echo
echo "Observability cost (REST, batching on): A = default settings, B = ${quiet_flags[*]};"
echo "runs alternate A/B/A/B (a fresh server each), means of two runs each; ratio = B/A requests/s."
[[ -z "$quiet_note" ]] || echo "$quiet_note"
echo
echo "| concurrency | A requests/s | B requests/s | ratio B/A | A p99 ms | B p99 ms | runs A/B/A/B requests/s | errors |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
cat "$observability_rows"
if [[ -s "$errors_seen" ]]; then
    echo
    echo "Errors:"
    cat "$errors_seen"
fi
