#!/usr/bin/env bash
# Rolling updates behind a real load balancer, tested for real (a step of scripts/test.sh):
# three replicas of `tensorplug serve` — containers of the image (scripts/build-image.sh
# around the test build's binary, run with podman on the host's loopback), or processes
# with REPLICAS=processes or where podman cannot run — behind HAProxy, which
# checks `/v2/health/ready` every 200 ms — what a Kubernetes Service does with readiness
# probes — under closed-loop load from tools/loadgen (16 clients, keep-alive).
#
#   1. Rolling update: every replica in turn gets SIGTERM (readiness off at once, serving
#      on for --shutdown-delay-ms while the balancer notices, then the drain), exits 0,
#      and is replaced by one serving version 2 of the model, which must become ready and
#      be routed before the next replica goes. Goal: zero failed requests, and only
#      version 2 answering at the end.
#   2. A replica killed (SIGKILL) under load: the only failures allowed are requests in
#      flight on it (at most the clients' count); reports them and how long the balancer
#      took to mark it down.
#
# SHUTDOWN_DELAY_MS sets the replicas' --shutdown-delay-ms (default 1000: five of the
# balancer's check intervals). Prints the figures. Needs haproxy (installed
# here when missing: scripts/toolchains.sh balancer) and python3.
set -euo pipefail
script=test-rolling-update
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/lib/plugins.sh
./scripts/toolchains.sh balancer >/dev/null
command -v haproxy >/dev/null 2>&1 || fail "haproxy is missing: install it with ./scripts/toolchains.sh balancer"

cargo build --locked -p tensorplug --bin tensorplug -p tensorplug-loadgen --bin tensorplug-loadgen >/dev/null 2>&1 ||
    fail "cargo build of tensorplug and tensorplug-loadgen failed"
server="$target_dir/debug/tensorplug"
delay_ms="${SHUTDOWN_DELAY_MS:-1000}"
replicas="${REPLICAS:-containers}"
if [[ "$replicas" == containers ]] && { [[ $EUID -ne 0 ]] || ! command -v podman >/dev/null 2>&1; }; then
    echo "$script: podman cannot run here (it needs root): replicas are processes" >&2
    replicas=processes
fi
export CONTAINERS_CONF="$root/scripts/containers.conf"
image="tensorplug:rolling-$$"
loadgen="$target_dir/debug/tensorplug-loadgen"
[[ -f examples/models/digits/predict.wasm ]] || fail "build the plugins first (./scripts/build-plugins.sh)"

work="$(mktemp -d)"
declare -a pids=()
haproxy_pid=""
cleanup() {
    # Quietly: bash reports each job it reaps that a signal ended.
    exec 2>/dev/null
    for pid in "${pids[@]}" $haproxy_pid; do kill -KILL "$pid" 2>/dev/null || true; done
    if [[ "$replicas" == containers ]]; then
        for i in 0 1 2; do podman rm -f "tensorplug-rolling-$$-$i" >/dev/null 2>&1 || true; done
        podman rmi -f "$image" >/dev/null 2>&1 || true
    fi
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Version 1 and version 2 of the digits model (the same plugins; the version is what a
# client sees in `model_version`).
for version in 1 2; do
    mkdir -p "$work/v$version"
    cp -r examples/models/digits "$work/v$version/"
    sed -i "s/^version = \"1\"/version = \"$version\"/" "$work/v$version/digits/model.toml"
done

ports=("$(free_port)" "$(free_port)" "$(free_port)")
balancer="$(free_port)"

# start INDEX VERSION: replica INDEX serving version VERSION on its port, ready.
start() {
    local args=(--host 127.0.0.1 --http-port "${ports[$1]}" --grpc-port off
        --shutdown-delay-ms "$delay_ms" --shutdown-grace-secs 30 --log warn)
    if [[ "$replicas" == containers ]]; then
        podman run -d --name "tensorplug-rolling-$$-$1" --network host --read-only \
            -v "$work/v$2:/models:ro" -v "$work/cache:/var/cache/tensorplug" \
            "$image" /models "${args[@]}" >/dev/null
    else
        "$server" serve "$work/v$2" --cache-dir "$work/cache" "${args[@]}" >>"$work/replica-$1.log" 2>&1 &
        pids[$1]=$!
    fi
    wait_ready "${ports[$1]}" 120 >/dev/null || fail "replica $1 on port ${ports[$1]} did not become ready"
}

# terminate INDEX: SIGTERM, then the replica must drain and exit 0.
terminate() {
    local code
    if [[ "$replicas" == containers ]]; then
        podman stop -t 30 "tensorplug-rolling-$$-$1" >/dev/null
        code="$(podman inspect --format '{{.State.ExitCode}}' "tensorplug-rolling-$$-$1")"
        [[ "$code" == 0 ]] || fail "replica $1 exited with $code after SIGTERM: $(podman logs "tensorplug-rolling-$$-$1" 2>&1 | tail -n 5)"
        podman rm "tensorplug-rolling-$$-$1" >/dev/null
    else
        kill -TERM "${pids[$1]}"
        wait "${pids[$1]}" || fail "replica $1 did not exit 0 after SIGTERM: $(tail -n 5 "$work/replica-$1.log")"
    fi
}

# kill INDEX: SIGKILL, no drain.
kill_replica() {
    if [[ "$replicas" == containers ]]; then
        podman kill --signal KILL "tensorplug-rolling-$$-$1" >/dev/null
    else
        { kill -KILL "${pids[$1]}" && wait "${pids[$1]}"; } 2>/dev/null || true
    fi
}

mkdir -p "$work/cache"
if [[ "$replicas" == containers ]]; then
    # The container's user writes the compile cache.
    chown 65532:65532 "$work/cache"
    ./scripts/build-image.sh --binary "$server" --tag "$image" >/dev/null
fi
for i in 0 1 2; do start "$i" 1; done

cat >"$work/haproxy.cfg" <<EOF
global
    maxconn 1000
    stats socket $work/haproxy.sock level admin
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    # A request a replica could not take (refused, reset before an answer) goes to
    # another; inference bodies are small and fully buffered, so they can be resent.
    option http-buffer-request
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response
frontend inference
    bind 127.0.0.1:$balancer
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /v2/health/ready
    http-check expect status 200
    default-server inter 200ms fall 1 rise 2
    server r0 127.0.0.1:${ports[0]} check
    server r1 127.0.0.1:${ports[1]} check
    server r2 127.0.0.1:${ports[2]} check
EOF
haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!
wait_ready "$balancer" 120 >/dev/null || fail "the balancer did not become ready"

# The state HAProxy holds for replica NAME (UP, DOWN, ...), from its stats socket.
server_state() {
    python3 - "$work/haproxy.sock" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
for line in data.decode().splitlines():
    fields = line.split(",")
    if len(fields) > 17 and fields[0] == "replicas" and fields[1] == sys.argv[2]:
        print(fields[17])
EOF
}

load() {
    "$loadgen" "http://127.0.0.1:$balancer/v2/models/digits/infer" -b tests/data/digits/test_requests.jsonl \
        -c 16 -w 0s -d "$1" --timeout 10s --json
}
field() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

# --- 1. a rolling update under load ----------------------------------------------------
load 25s >"$work/rolling.json" &
load_pid=$!
sleep 2
for i in 0 1 2; do
    terminate "$i"
    start "$i" 2
    # Routed again: two health checks passed (rise 2).
    for _ in $(seq 1 100); do [[ "$(server_state "r$i")" == UP ]] && break; sleep 0.05; done
    [[ "$(server_state "r$i")" == UP ]] || fail "replica $i (version 2) was not routed"
done
wait "$load_pid" || fail "the load generator failed"
requests="$(field "$work/rolling.json" requests)"
errors="$(field "$work/rolling.json" errors)"
versions="$(python3 - "$balancer" <<'EOF'
import json, sys, urllib.request
line = open("tests/data/digits/test_requests.jsonl").readline().encode()
seen = set()
for _ in range(30):
    request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v2/models/digits/infer", line,
                                     {"content-type": "application/json"})
    seen.add(json.load(urllib.request.urlopen(request, timeout=10))["model_version"])
print(",".join(sorted(seen)))
EOF
)"
echo "rolling update of 3 replicas ($replicas) under load (shutdown delay $delay_ms ms): $requests requests, $errors failed; versions answering after it: $versions"
[[ "$errors" == 0 ]] || fail "$errors requests failed during the rolling update: $(field "$work/rolling.json" first_error)"
[[ "$versions" == 2 ]] || fail "after the rolling update, versions $versions answered (want 2 only)"

# --- 2. a replica killed under load ----------------------------------------------------
load 8s >"$work/killed.json" &
load_pid=$!
sleep 3
killed_at="$(date +%s.%N)"
kill_replica 1
for _ in $(seq 1 200); do [[ "$(server_state r1)" == DOWN ]] && break; sleep 0.01; done
down_at="$(date +%s.%N)"
[[ "$(server_state r1)" == DOWN ]] || fail "the balancer did not mark the killed replica down"
wait "$load_pid" || fail "the load generator failed"
requests="$(field "$work/killed.json" requests)"
errors="$(field "$work/killed.json" errors)"
awk -v a="$killed_at" -v b="$down_at" -v r="$requests" -v e="$errors" 'BEGIN {
    printf "a replica killed (SIGKILL) under load: %d requests, %d failed (in flight on it); marked down after %.0f ms\n", r, e, (b - a) * 1000 }'
[[ "$errors" -le 16 ]] || fail "$errors requests failed after a SIGKILL: more than the 16 that can be in flight"
