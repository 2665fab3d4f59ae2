#!/usr/bin/env bash
# Figures for /metrics under a metric-flooding plugin (issue 18, point 1): serves one copy
# of the faulty test plugin (tests/models/faulty, built by scripts/build-plugins.sh), sends
# it fault -37 (histograms with 8 long, quote-filled labels until the host refuses), then
# scrapes /metrics 16 times at once. Prints the page's size before and after the flood
# and the server's peak RSS growth during the scrapes (Linux: VmHWM, reset through
# /proc/<pid>/clear_refs, so run it as root or as the server's owner). Loopback only.
#
#   scripts/metrics-flood.sh BINARY [PORT]    e.g. scripts/metrics-flood.sh target/release/tensorplug 18931
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin=$1; port=${2:-18931}; wasm="$root/tests/models/faulty/predict.wasm"
repo=$(mktemp -d); mkdir "$repo/faulty"; cp "$wasm" "$repo/faulty/predict.wasm"
cat > "$repo/faulty/model.toml" <<'TOML'
[stages]
predict = "predict.wasm"
[[inputs]]
name = "x"
datatype = "FP32"
shape = [1]
[[outputs]]
name = "y"
datatype = "FP32"
shape = [1]
[batching]
max_batch_size = 1
[limits]
instances = 1
TOML
"$bin" serve "$repo" --host 127.0.0.1 --http-port "$port" --grpc-port off --log warn >/tmp/mf-$port.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$repo"' EXIT
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
empty=$(curl -s "http://127.0.0.1:$port/metrics" | wc -c)
curl -s -o /dev/null -w 'flood item: %{http_code}\n' -H 'content-type: application/json' \
  -d '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[-37]}]}' \
  "http://127.0.0.1:$port/v2/models/faulty/infer"
page=$(curl -s "http://127.0.0.1:$port/metrics" | wc -c)
rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
echo 5 > /proc/$pid/clear_refs
start=$(date +%s.%N)
for i in $(seq 16); do curl -s -o /dev/null "http://127.0.0.1:$port/metrics" & done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
end=$(date +%s.%N)
hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
echo "page before flood: $empty bytes; after: $page bytes"
echo "RSS before scrapes: $rss KiB; peak during 16 concurrent scrapes: $hwm KiB (+$((hwm - rss)) KiB); took $(echo "$end - $start" | bc) s"
