#!/usr/bin/env bash
# What tracing costs (docs/operations.md, "Tracing"): the digits model served by the same
# release build four times, side by side — tracing off (the default), on with every
# request sampled (ratio 1.0), and on at ratio 0.01, exporting over OTLP/HTTP to the
# cheapest collector there is (tensorplug-floor's /v1/traces, which acknowledges without
# decoding), and on at ratio 1.0 exporting into a black hole (a socket that takes
# connections and never reads: every export waits for its timeout). Each round loads each
# server in turn for the same time, at each concurrency, so that all see the same machine;
# prints every run, then each server's mean requests/s and median p50 and p99 against
# tracing off, what became of the spans (exported, failed, dropped: the servers' own
# counters), and each server's memory (RSS after the warm-up and at the end, and its peak).
#
# Works from any directory. Environment:
#   BENCH_SECONDS      measured seconds per run (default 5)
#   BENCH_WARMUP       warm-up per run, not counted (default 1s)
#   BENCH_ROUNDS       rounds (default 3)
#   BENCH_CONCURRENCY  the concurrencies (default "64 1")
#   BENCH_BASELINE     another tensorplug binary (e.g. the build before tracing) served
#                      beside them, tracing off: "off" against it is the cost of the
#                      feature when unused (default: none)
#   BENCH_QUEUE_SIZE   --trace-queue-size of the traced servers (default: the server's)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${BENCH_SECONDS:-5}"
warmup="${BENCH_WARMUP:-1s}"
rounds="${BENCH_ROUNDS:-3}"
concurrencies="${BENCH_CONCURRENCY:-64 1}"

source scripts/bench-common.sh

bodies="$root/tests/data/digits/test_requests.jsonl"
repository="$work/repository"
mkdir -p "$repository"
ln -s "$root/examples/models/digits" "$repository/digits"
sink_port="$(free_port)"
"$floor" examples/models/digits --http-port "$sink_port" >"$work/sink.log" 2>&1 &
pids=("$!")
hole_port="$(free_port)"
python3 -c '
import socket, sys, time
hole = socket.socket()
hole.bind(("127.0.0.1", int(sys.argv[1])))
hole.listen(4096)
time.sleep(1e9)
' "$hole_port" &
pids+=("$!")
trap 'kill "${pids[@]}" 2>/dev/null || true; cleanup' EXIT

# name, binary, then the flags that make it what it is.
declare -A ports
start() {
    local name="$1" binary="$2"
    shift 2
    local port
    port="$(free_port)"
    ports[$name]="$port"
    "$binary" serve "$repository" --host 127.0.0.1 --http-port "$port" --grpc-port off \
        --cache-dir "$work/cache" --log warn "$@" >"$work/$name.log" 2>&1 &
    pids+=("$!")
    server_pids[$name]="$!"
}
declare -A server_pids
# VmRSS and VmHWM of a server, in MiB.
memory() {
    awk '/^VmRSS|^VmHWM/ { printf "%s %d ", $1, $2 / 1024 }' "/proc/${server_pids[$1]}/status"
}
queue=()
[[ -n "${BENCH_QUEUE_SIZE:-}" ]] && queue=(--trace-queue-size "$BENCH_QUEUE_SIZE")
servers=(off ratio-1 ratio-0.01 black-hole)
start off "$server"
start ratio-1 "$server" --otlp-endpoint "http://127.0.0.1:$sink_port" --trace-sampler-arg 1.0 "${queue[@]}"
start ratio-0.01 "$server" --otlp-endpoint "http://127.0.0.1:$sink_port" --trace-sampler-arg 0.01 "${queue[@]}"
start black-hole "$server" --otlp-endpoint "http://127.0.0.1:$hole_port" --trace-sampler-arg 1.0 \
    --otlp-timeout-ms 2000 "${queue[@]}"
if [[ -n "${BENCH_BASELINE:-}" ]]; then
    start baseline "$BENCH_BASELINE"
    servers+=(baseline)
fi
for name in "${servers[@]}"; do
    deadline=$((SECONDS + 300))
    until curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:${ports[$name]}/v2/health/ready"; do
        ((SECONDS < deadline)) || { echo "bench-tracing: $name was not ready:" >&2; cat "$work/$name.log" >&2; exit 1; }
        sleep 0.2
    done
done

for name in "${servers[@]}"; do
    echo "$name $(memory "$name")" >>"$work/memory-start"
done
echo "| round | concurrency | server | req/s | p50 ms | p99 ms | errors |"
echo "| ---: | ---: | --- | ---: | ---: | ---: | ---: |"
for round in $(seq "$rounds"); do
    for c in $concurrencies; do
        for name in "${servers[@]}"; do
            "$loadgen" "http://127.0.0.1:${ports[$name]}/v2/models/digits/infer" --concurrency "$c" \
                --duration "${seconds}s" --warmup "$warmup" --threads 1 --body-file "$bodies" --json |
                python3 -c '
import json, sys
d = json.load(sys.stdin)
print("| %s | %s | %s | %d | %.3f | %.3f | %d |" % (sys.argv[1], sys.argv[2], sys.argv[3], d["rps"], d["p50_us"] / 1000, d["p99_us"] / 1000, d["errors"]))
' "$round" "$c" "$name" | tee -a "$work/rows"
        done
    done
done
echo
for name in ratio-1 ratio-0.01 black-hole; do
    curl -sf "http://127.0.0.1:${ports[$name]}/metrics" | grep '^tensorplug_trace_spans' | sed "s/^/$name: /" >>"$work/spans"
done
for name in "${servers[@]}"; do
    echo "$name $(memory "$name")" >>"$work/memory-end"
done
python3 - "$work/rows" "$work/spans" "$work/memory-start" "$work/memory-end" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    runs[(int(cells[1]), cells[2])].append((float(cells[3]), float(cells[4]), float(cells[5]), int(cells[6])))
print("| concurrency | server | mean req/s | against off | p50 ms (median) | p50 against off | p99 ms (median) | errors |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in sorted({c for c, _ in runs}, reverse=True):
    off = runs[(c, "off")]
    off_rps = statistics.mean(r[0] for r in off)
    off_p50 = statistics.median(r[1] for r in off)
    for name in [n for cc, n in runs if cc == c]:
        rows = runs[(c, name)]
        rps = statistics.mean(r[0] for r in rows)
        p50 = statistics.median(r[1] for r in rows)
        p99 = statistics.median(r[2] for r in rows)
        print(f"| {c} | {name} | {rps:.0f} | {rps / off_rps:.3f} | {p50:.3f} | {p50 / off_p50:.2f} | {p99:.3f} | {sum(r[3] for r in rows)} |")
print()
counts = collections.defaultdict(dict)
for line in open(sys.argv[2]):
    name, series = line.split(": ", 1)
    key, value = series.rsplit(" ", 1)
    counts[name][key] = float(value)
print("| server | spans exported | failed | dropped | dropped share | waiting at the end |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name, c in counts.items():
    get = lambda outcome: c.get('tensorplug_trace_spans_total{outcome="%s"}' % outcome, 0)
    total = get("exported") + get("failed") + get("dropped")
    share = get("dropped") / total if total else 0
    waiting = c.get("tensorplug_trace_spans_waiting", 0)
    print(f"| {name} | {get('exported'):.0f} | {get('failed'):.0f} | {get('dropped'):.0f} | {share:.2%} | {waiting:.0f} |")
print()
def memory(path):
    rows = {}
    for line in open(path):
        words = line.split()
        rows[words[0]] = dict(zip(words[1::2], map(int, words[2::2])))
    return rows
start, end = memory(sys.argv[3]), memory(sys.argv[4])
print("| server | RSS ready MiB | RSS at the end MiB | peak MiB |")
print("| --- | ---: | ---: | ---: |")
for name in start:
    print(f"| {name} | {start[name]['VmRSS:']} | {end[name]['VmRSS:']} | {end[name]['VmHWM:']} |")
PY
