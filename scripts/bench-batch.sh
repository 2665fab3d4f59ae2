#!/usr/bin/env bash
# Batch inference benchmark: `tensorplug infer` (release build) over the 450 digits
# requests (tests/data/digits/test_requests.jsonl) repeated to 20,000 lines, against a
# local release server serving examples/models on 127.0.0.1 (REST JSON, REST binary
# tensor data, gRPC) and in-process (--repository, no server), each with --workers 16 at
# --batch-size 1 and 32. Prints a markdown table of lines per second.
#
# Each run's rate is the one its summary line reports: lines answered over the whole run,
# connecting (or loading the model, from a warm compile cache) included. Every run's
# answers are checked: 20,000 lines, all successful (exit status 0).
#
# With BENCH_MLSERVER=1 it then runs `mlserver infer` (MLServer's batch client, pinned in
# a virtualenv it installs from PyPI into <target>/bench-env/mlserver) and `tensorplug
# infer` with the same flags against the same server (REST, --workers, --batch-size), both
# timed by the wall clock from start to exit, and prints the ratio.
#
# Works from any directory. Environment:
#   BENCH_LINES        lines in the input (default 20000)
#   BENCH_WORKERS      --workers (default 16)
#   BENCH_BATCH_SIZES  the --batch-size values (default "1 32")
#   BENCH_TRANSPORTS   what to run (default "rest rest-binary grpc in-process")
#   BENCH_BASELINE     another tensorplug binary (e.g. the previous release) whose
#                      `tensorplug infer` runs each row right after this build's, against
#                      the same server (or in-process): its lines/s and this / baseline
#                      in two more columns (the cost of a change, measured in one run)
#   BENCH_MLSERVER     1: also `mlserver infer` against `tensorplug infer` (default 0)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

lines="${BENCH_LINES:-20000}"
workers="${BENCH_WORKERS:-16}"
batch_sizes="${BENCH_BATCH_SIZES:-1 32}"
transports="${BENCH_TRANSPORTS:-rest rest-binary grpc in-process}"
baseline="${BENCH_BASELINE:-}"

for transport in $transports; do
    case "$transport" in
        rest | rest-binary | grpc | in-process) ;;
        *) echo "bench-batch: unknown transport '$transport' (rest, rest-binary, grpc, in-process)" >&2; exit 1 ;;
    esac
done

# Builds the plugins and the release binaries; sets `server`, `work`, `free_port` and the
# cleanup of `server_pid`.
source scripts/bench-common.sh
bin="$server"

# The 450 requests, repeated (in order) to $lines lines.
input="$work/in.jsonl"
awk -v n="$lines" '{ line[NR] = $0 } END { for (i = 0; i < n; i++) print line[i % NR + 1] }' \
    tests/data/digits/test_requests.jsonl > "$input"

http_port="$(free_port)"
grpc_port="$(free_port)"
"$bin" serve examples/models --onnxruntime-lib "$onnxruntime_lib" --host 127.0.0.1 --http-port "$http_port" --grpc-port "$grpc_port" \
    --model-control none --log warn --cache-dir "$work/cache" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do
    if python3 -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$http_port/v2/health/ready', timeout=1)" 2>/dev/null; then
        break
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
done

# Runs `$1 infer` with the rest of the arguments over the input and sets `rate` (lines/s)
# and `seconds` from its summary, after checking that every line was answered.
run_infer() {
    local bin="$1" output="$work/out.jsonl"
    shift
    if ! "$bin" infer "$@" -m digits -i "$input" -o "$output" \
        --workers "$workers" --batch-size "$batch" -q 2> "$work/infer.log"; then
        echo "bench-batch: $bin: $transport at batch size $batch failed:" >&2
        cat "$work/infer.log" >&2
        exit 1
    fi
    answered="$(wc -l < "$output")"
    [[ "$answered" -eq "$lines" ]] || { echo "bench-batch: $answered answers for $lines lines" >&2; exit 1; }
    rm -f "$output"
    summary="$(grep 'lines answered' "$work/infer.log")"
    rate="$(sed -n 's/.*(\([0-9]*\) lines\/s).*/\1/p' <<< "$summary")"
    seconds="$(sed -n 's/.* in \([0-9.]*\) s (.*/\1/p' <<< "$summary")"
}

if [[ -n "$baseline" ]]; then
    echo "| transport | batch size | workers | lines | lines/s | seconds | baseline lines/s | this / baseline |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
else
    echo "| transport | batch size | workers | lines | lines/s | seconds |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: |"
fi
for transport in $transports; do
    for batch in $batch_sizes; do
        case "$transport" in
            rest) target=(-u "127.0.0.1:$http_port") ;;
            rest-binary) target=(-u "127.0.0.1:$http_port" -b) ;;
            grpc) target=(-u "127.0.0.1:$grpc_port" -t grpc) ;;
            in-process) target=(--repository examples/models --cache-dir "$work/cache") ;;
        esac
        run_infer "$bin" "${target[@]}"
        row="| $transport | $batch | $workers | $lines | $rate | $seconds |"
        if [[ -n "$baseline" ]]; then
            this_rate="$rate"
            run_infer "$baseline" "${target[@]}"
            row="$row $rate | $(python3 -c "print(f'{$this_rate / max($rate, 1):.2f}')") |"
        fi
        echo "$row"
    done
done

[[ "${BENCH_MLSERVER:-0}" == 1 ]] || exit 0

mlserver_env="$target_dir/bench-env/mlserver"
if ! "$mlserver_env/bin/mlserver" --version >/dev/null 2>&1; then
    echo "bench-batch: installing mlserver==1.7.1 into $mlserver_env" >&2
    python3 -m venv "$mlserver_env"
    "$mlserver_env/bin/pip" install -q mlserver==1.7.1 >&2
fi

# Runs a client command to its end and sets `rate` (lines/s by the wall clock) after
# checking it answered every line in $work/out.jsonl.
run_timed() {
    local start end
    rm -f "$work/out.jsonl"
    start="$(date +%s.%N)"
    "$@" >"$work/client.log" 2>&1 || { cat "$work/client.log" >&2; exit 1; }
    end="$(date +%s.%N)"
    answered="$(wc -l < "$work/out.jsonl")"
    [[ "$answered" -eq "$lines" ]] || { echo "bench-batch: $1: $answered answers for $lines lines" >&2; exit 1; }
    rate="$(python3 -c "print(round($lines / ($end - $start)))")"
}

echo
echo "| client (REST, --workers $workers) | batch size | lines | tensorplug infer lines/s | mlserver infer lines/s | ratio |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for batch in $batch_sizes; do
    run_timed "$bin" infer -u "127.0.0.1:$http_port" -m digits -i "$input" -o "$work/out.jsonl" \
        -w "$workers" -s "$batch" -q
    ours="$rate"
    run_timed "$mlserver_env/bin/mlserver" infer -u "127.0.0.1:$http_port" -m digits -i "$input" \
        -o "$work/out.jsonl" -w "$workers" -s "$batch"
    echo "| both | $batch | $lines | $ours | $rate | **$(python3 -c "print(f'{$ours / max($rate, 1):.1f}')")** |"
done
