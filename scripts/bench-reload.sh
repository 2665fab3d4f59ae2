#!/usr/bin/env bash
# Reload figures for the digits model, with the release build on 127.0.0.1:
#   1. a restart's time to ready with a cold compile cache and with a warm one;
#   2. the time from a change of the model folder (model.toml's version) to the new
#      version answering, averaged over the reloads below;
#   3. failed requests from 16 closed-loop clients (tools/loadgen) during 20 reloads.
# Works from any directory. Environment: RELOADS (default 20), RELOAD_EVERY (seconds
# between reloads, default 1).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
reloads="${RELOADS:-20}"
every="${RELOAD_EVERY:-1}"

source scripts/bench-common.sh

repo="$work/repo"
mkdir -p "$repo"
cp -R examples/models/digits "$repo/digits"
cache="$work/cache"
port="$(free_port)"
base="http://127.0.0.1:$port"
now() { date +%s.%N; }
elapsed_ms() { python3 -c "print(round(($2 - $1) * 1000))"; }

# Starts the server; sets server_pid, and ready_ms to the milliseconds until
# /v2/health/ready answered 200.
start_timed() {
    local t0
    t0="$(now)"
    "$server" serve "$repo" --host 127.0.0.1 --http-port "$port" --log warn --cache-dir "$cache" \
        --watch-debounce-ms 100 >"$work/server.log" 2>&1 &
    server_pid=$!
    until [[ "$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$base/v2/health/ready" || true)" == 200 ]]; do
        kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
        sleep 0.01
    done
    ready_ms="$(elapsed_ms "$t0" "$(now)")"
}

stop() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }

start_timed; cold="$ready_ms"; stop
start_timed; warm="$ready_ms"

version() { curl -s "$base/v2/models/digits" | python3 -c 'import json,sys; print(json.load(sys.stdin)["versions"][0])'; }

"$loadgen" "$base/v2/models/digits/infer" --concurrency 16 --duration "$((reloads * every + 5))s" --warmup 1s \
    --body-file tests/data/digits/test_requests.jsonl --json >"$work/load.json" &
load_pid=$!
sleep 2
total=0
for i in $(seq 2 $((reloads + 1))); do
    t0="$(now)"
    sed -i "s/^version = .*/version = \"$i\"/" "$repo/digits/model.toml"
    until [[ "$(version)" == "$i" ]]; do sleep 0.005; done
    ms="$(elapsed_ms "$t0" "$(now)")"
    total=$((total + ms))
    echo "bench-reload: reload $((i - 1)) -> version $i serving after $ms ms" >&2
    sleep "$every"
done
wait "$load_pid"
stop

python3 - "$work/load.json" "$cold" "$warm" "$total" "$reloads" <<'PY'
import json, sys
load = json.load(open(sys.argv[1]))
cold, warm, total, reloads = (int(x) for x in sys.argv[2:6])
print(f"| restart to ready, cold compile cache | {cold} ms |")
print(f"| restart to ready, warm compile cache | {warm} ms |")
print(f"| file change to new version serving (mean of {reloads}, 100 ms debounce) | {total // reloads} ms |")
print(f"| requests during {reloads} reloads (16 clients) | {load['requests']} |")
print(f"| failed requests | {load['errors']} |")
print(f"| p99 latency during reloads | {load['p99_us'] / 1000:.2f} ms |")
PY
