#!/usr/bin/env bash
# NATS against REST, in one run: serves the digits model (a copy of examples/models/digits,
# batching on, as shipped) with the release build on 127.0.0.1, with the queue edge on
# (`--nats-url`, a nats-server with JetStream started here on a free port with a temporary
# store), and loads it with tools/loadgen at concurrency 1, 8 and 32: REST (one keep-alive
# HTTP/1.1 connection per client) and NATS (every client on one connection, each request
# published through JetStream, the stream's acknowledgement awaited, then the answer
# awaited on the load generator's inbox), the same request bodies
# (tests/data/digits/test_requests.jsonl) against the same server process. Prints a
# markdown table; ratio = NATS requests/s over REST's.
#
# A NATS request's latency is publish to answer: the stream's acknowledgement, the broker's
# hop to the server's pull consumer, the inference, and the answer's hop back; the broker
# shares the machine's cores with the server and the load generator.
#
# Works from any directory. Environment:
#   BENCH_SECONDS      measured seconds per run (default 10)
#   BENCH_WARMUP       warm-up per run, not counted (default 2s)
#   BENCH_CONCURRENCY  the concurrencies to run (default "1 8 32")
#   LOADGEN_THREADS    the load generator's worker threads (default 1)
#   NATS_SERVER        the nats-server binary (default: on the PATH, else /usr/sbin's,
#                      installed by ./scripts/toolchains.sh broker)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${BENCH_SECONDS:-10}"
warmup="${BENCH_WARMUP:-2s}"
concurrencies="${BENCH_CONCURRENCY:-1 8 32}"
threads="${LOADGEN_THREADS:-1}"

nats_server="${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}"
[[ -x "$nats_server" ]] ||
    { echo "bench-nats: no nats-server at '$nats_server' (./scripts/toolchains.sh broker installs it)" >&2; exit 1; }
[[ -n "${concurrencies// /}" ]] || { echo "bench-nats: BENCH_CONCURRENCY is empty" >&2; exit 1; }

source scripts/bench-common.sh

# bench-common.sh's `cleanup` stops the server and removes `work`; the broker, whose store
# is in `work`, is stopped in between (after the server, so that the server does not spend
# its shutdown reconnecting).
nats_pid=""
stop_all() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
    fi
    if [[ -n "$nats_pid" ]]; then
        kill "$nats_pid" 2>/dev/null || true
        wait "$nats_pid" 2>/dev/null || true
        nats_pid=""
    fi
    cleanup
}
trap stop_all EXIT
# An interrupted run exits through the EXIT trap too.
trap 'exit 130' INT
trap 'exit 143' TERM

bodies="$root/tests/data/digits/test_requests.jsonl"

# The model repository: a copy of the digits model alone (examples/models also holds
# minilm, which would need --onnxruntime-lib and load for nothing).
repo="$work/repo"
mkdir -p "$repo"
cp -R examples/models/digits "$repo/digits"

# Three distinct free ports: the broker, REST, gRPC (the server always listens on both).
nats_port="$(free_port)"
http_port="$(free_port)"
while [[ "$http_port" == "$nats_port" ]]; do http_port="$(free_port)"; done
grpc_port="$(free_port)"
while [[ "$grpc_port" == "$nats_port" || "$grpc_port" == "$http_port" ]]; do grpc_port="$(free_port)"; done
nats_url="nats://127.0.0.1:$nats_port"
base="http://127.0.0.1:$http_port"

nats_log="$work/nats-server.log"
"$nats_server" -js -sd "$work/nats-store" -a 127.0.0.1 -p "$nats_port" >"$nats_log" 2>&1 &
nats_pid=$!
deadline=$((SECONDS + 30))
until grep -q "Server is ready" "$nats_log"; do
    if ! kill -0 "$nats_pid" 2>/dev/null; then
        echo "bench-nats: nats-server exited before it was ready:" >&2
        cat "$nats_log" >&2
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        echo "bench-nats: nats-server was not ready after 30 s:" >&2
        cat "$nats_log" >&2
        exit 1
    fi
    sleep 0.1
done
echo "bench-nats: nats-server $("$nats_server" --version 2>&1 | head -n 1), pid $nats_pid at $nats_url" >&2

server_log="$work/server.log"
"$server" serve "$repo" --host 127.0.0.1 --http-port "$http_port" --grpc-port "$grpc_port" \
    --shutdown-grace-secs 5 --log warn --nats-url "$nats_url" >"$server_log" 2>&1 &
server_pid=$!
# Ready means the model is loaded and the broker connected (--nats-readiness required).
deadline=$((SECONDS + 120))
until [[ "$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$base/v2/health/ready" || true)" == 200 ]]; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "bench-nats: the server exited before it was ready:" >&2
        cat "$server_log" >&2
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        echo "bench-nats: the server was not ready after 120 s:" >&2
        cat "$server_log" >&2
        exit 1
    fi
    sleep 0.2
done
echo "bench-nats: server pid $server_pid at $base, consuming from $nats_url" >&2

# Runs the load generator once (writes $work/<protocol>-<c>.json).
load() {
    local protocol="$1" c="$2"
    local target=("$base/v2/models/digits/infer")
    if [[ "$protocol" == nats ]]; then
        target=("$nats_url" --protocol nats --model digits)
    fi
    "$loadgen" "${target[@]}" --concurrency "$c" --duration "${seconds}s" \
        --warmup "$warmup" --threads "$threads" --body-file "$bodies" --json >"$work/$protocol-$c.json"
    python3 - "$work/$protocol-$c.json" "$protocol" "$c" <<'PY' >&2
import json, sys
path, protocol, c = sys.argv[1:]
lg = json.load(open(path))
print(f"bench-nats: {protocol}, concurrency {c}: {lg['rps']:.0f} req/s, p50 {lg['p50_us']}us, "
      f"p99 {lg['p99_us']}us, errors {lg['errors']}")
PY
}

for c in $concurrencies; do
    load rest "$c"
    load nats "$c"
done

# The server must have lived through every run (a crash would show as errors, but say so).
kill -0 "$server_pid" 2>/dev/null || { echo "bench-nats: the server died during the runs:" >&2; cat "$server_log" >&2; exit 1; }

echo
echo "tensorplug, NATS JetStream against REST: digits model, ${seconds}s per run (+ $warmup warm-up), loadgen threads $threads, $(nproc) cores"
echo
python3 - "$work" "$concurrencies" <<'PY'
import json, sys
work, concurrencies = sys.argv[1:]
print("| concurrency | REST req/s | NATS req/s | ratio NATS/REST | REST p50/p99 ms | NATS p50/p99 ms |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
errors = []
for c in concurrencies.split():
    rest = json.load(open(f"{work}/rest-{c}.json"))
    nats = json.load(open(f"{work}/nats-{c}.json"))
    ratio = f"{nats['rps'] / rest['rps']:.2f}" if rest["rps"] else "-"
    def ms(run):
        return f"{run['p50_us'] / 1000:.2f} / {run['p99_us'] / 1000:.2f}"
    print(f"| {c} | {rest['rps']:.0f} | {nats['rps']:.0f} | {ratio} | {ms(rest)} | {ms(nats)} |")
    for name, run in (("REST", rest), ("NATS", nats)):
        if run["errors"]:
            errors.append(f"- {name}, concurrency {c}: {run['errors']} errors of {run['requests']}, "
                          f"first: {run['first_error']}")
print()
print("Errors (non-2xx REST answers, NATS answers whose Tensorplug-Status is not 200, failed publishes, time-outs):")
print("\n".join(errors) if errors else "none")
PY
