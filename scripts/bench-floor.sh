#!/usr/bin/env bash
# tensorplug against the floor, alternating: serves the example repository (release
# build) and tools/floor side by side, then for each round, protocol and concurrency
# loads tensorplug and then the floor for the same time, so that both see the same
# machine; prints every run and the ratio of the means (tensorplug / floor).
# scripts/bench-load.sh measures all of tensorplug's points before the floor's, which on a
# busy machine lets the two drift apart; this is the steadier measurement of the ratio.
#
# Works from any directory. Environment:
#   BENCH_SECONDS      measured seconds per run (default 5)
#   BENCH_WARMUP       warm-up per run, not counted (default 1s)
#   BENCH_ROUNDS       rounds (default 3)
#   BENCH_CONCURRENCY  the concurrencies (default "64")
#   BENCH_PROTOCOLS    rest, grpc, grpc-raw (default "rest")
#   BENCH_BASELINE     another tensorplug binary (e.g. the previous release) served beside
#                      this one and loaded in the same rounds: the cost of a change, as the
#                      ratio of the two means (default: none)
#   BENCH_BASELINE_FLOOR  the baseline's own floor (another tensorplug-floor binary), also
#                      loaded in the same rounds: the ratio before the change, beside the
#                      ratio after (default: none)
#   BENCH_OUTPUT       also append every run to this file, one JSON object per line
#                      (server, protocol, concurrency, round, rps, p50_us, p99_us, errors):
#                      what scripts/plot-performance.py draws (default: none)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${BENCH_SECONDS:-5}"
warmup="${BENCH_WARMUP:-1s}"
rounds="${BENCH_ROUNDS:-3}"
concurrencies="${BENCH_CONCURRENCY:-64}"
protocols="${BENCH_PROTOCOLS:-rest}"

source scripts/bench-common.sh

bodies="$root/tests/data/digits/test_requests.jsonl"
ports=()
for _ in 1 2 3 4 5 6 7 8; do ports+=("$(free_port)"); done
"$server" serve examples/models --onnxruntime-lib "$onnxruntime_lib" --host 127.0.0.1 --http-port "${ports[0]}" --grpc-port "${ports[1]}" \
    --no-cache --log warn >"$work/server.log" 2>&1 &
server_pid=$!
"$floor" examples/models/digits --http-port "${ports[2]}" --grpc-port "${ports[3]}" >"$work/floor.log" 2>&1 &
floor_pid=$!
baseline="${BENCH_BASELINE:-}"
baseline_pid=""
ready_ports=("${ports[0]}" "${ports[2]}")
if [[ -n "$baseline" ]]; then
    "$baseline" serve examples/models --onnxruntime-lib "$onnxruntime_lib" --host 127.0.0.1 --http-port "${ports[4]}" --grpc-port "${ports[5]}" \
        --no-cache --log warn >"$work/baseline.log" 2>&1 &
    baseline_pid=$!
    ready_ports+=("${ports[4]}")
fi
baseline_floor="${BENCH_BASELINE_FLOOR:-}"
baseline_floor_pid=""
if [[ -n "$baseline_floor" ]]; then
    "$baseline_floor" examples/models/digits --http-port "${ports[6]}" --grpc-port "${ports[7]}" \
        >"$work/baseline-floor.log" 2>&1 &
    baseline_floor_pid=$!
    ready_ports+=("${ports[6]}")
fi
trap 'kill "$floor_pid" $baseline_pid $baseline_floor_pid 2>/dev/null || true; cleanup' EXIT
for port in "${ready_ports[@]}"; do
    deadline=$((SECONDS + 120))
    until curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$port/v2/health/ready"; do
        ((SECONDS < deadline)) || { echo "bench-floor: a server was not ready:" >&2; cat "$work"/*.log >&2; exit 1; }
        sleep 0.2
    done
done

# One run of SERVER: prints requests/s, p50 and p99 in ms and errors.
run() {
    local server="$1" protocol="$2" http="$3" grpc="$4" c="$5" round="$6" target
    if [[ "$protocol" == rest ]]; then
        target=("http://127.0.0.1:$http/v2/models/digits/infer")
    else
        target=("http://127.0.0.1:$grpc" --protocol "$protocol" --model digits)
    fi
    "$loadgen" "${target[@]}" --concurrency "$c" --duration "${seconds}s" --warmup "$warmup" \
        --threads 1 --body-file "$bodies" --json |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
if sys.argv[1]:
    row = {"server": sys.argv[2], "protocol": sys.argv[3], "concurrency": int(sys.argv[4]), "round": int(sys.argv[5])}
    row.update({k: d[k] for k in ("rps", "p50_us", "p99_us", "errors")})
    with open(sys.argv[1], "a") as out:
        out.write(json.dumps(row) + "\n")
print(round(d["rps"]), d["p50_us"] / 1000, d["p99_us"] / 1000, d["errors"])
' "${BENCH_OUTPUT:-}" "$server" "$protocol" "$c" "$round"
}

echo "| round | protocol | concurrency | tensorplug req/s | floor req/s | tensorplug p50 ms | floor p50 ms | tensorplug p99 ms | floor p99 ms | errors | baseline req/s | baseline p50 ms | baseline p99 ms | baseline floor req/s |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$rounds"); do
    for protocol in $protocols; do
        for c in $concurrencies; do
            read -r t_rps t_p50 t_p99 t_err < <(run tensorplug "$protocol" "${ports[0]}" "${ports[1]}" "$c" "$round")
            read -r f_rps f_p50 f_p99 f_err < <(run floor "$protocol" "${ports[2]}" "${ports[3]}" "$c" "$round")
            b_rps=0 b_p50=0 b_p99=0 b_err=0
            if [[ -n "$baseline" ]]; then
                read -r b_rps b_p50 b_p99 b_err < <(run baseline "$protocol" "${ports[4]}" "${ports[5]}" "$c" "$round")
            fi
            bf_rps=0 bf_err=0
            if [[ -n "$baseline_floor" ]]; then
                read -r bf_rps _ _ bf_err < <(run baseline-floor "$protocol" "${ports[6]}" "${ports[7]}" "$c" "$round")
            fi
            echo "| $round | $protocol | $c | $t_rps | $f_rps | $t_p50 | $f_p50 | $t_p99 | $f_p99 | $((t_err + f_err + b_err + bf_err)) | $b_rps | $b_p50 | $b_p99 | $bf_rps |" | tee -a "$work/rows"
        done
    done
done
echo
python3 - "$work/rows" <<'PY'
import collections, sys
import statistics
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    runs[(cells[1], cells[2])].append([float(c) for c in cells[3:]])
print("| protocol | concurrency | tensorplug mean req/s | floor mean req/s | ratio | p50 ms (median of runs) tensorplug / floor | p99 ms tensorplug / floor | baseline mean req/s | tensorplug / baseline | baseline p50 / p99 ms | baseline / its floor |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (protocol, c), rows in runs.items():
    t, f, b, bf = (statistics.mean(r[i] for r in rows) for i in (0, 1, 7, 10))
    t50, f50, t99, f99 = (statistics.median(r[i] for r in rows) for i in (2, 3, 4, 5))
    b50, b99 = (statistics.median(r[i] for r in rows) for i in (8, 9))
    against = f"**{t / b:.3f}**" if b else "-"
    baseline = f"{b50:.3f} / {b99:.3f}" if b else "-"
    before = f"**{b / bf:.2f}**" if b and bf else "-"
    print(f"| {protocol} | {c} | {t:.0f} | {f:.0f} | **{t / f:.2f}** | {t50:.3f} / {f50:.3f} (**{t50 / f50:.2f}**) "
          f"| {t99:.3f} / {f99:.3f} (**{t99 / f99:.2f}**) | {b:.0f} | {against} | {baseline} | {before} |")
PY
