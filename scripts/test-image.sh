#!/usr/bin/env bash
# Tests the container image for real with podman (a step of scripts/test.sh): builds it
# with scripts/build-image.sh around the binary of this checkout's test build
# (target/debug/tensorplug; the release image differs only in the binary's optimisation
# and in being static), then, each on loopback ports:
#   1. with --read-only and a new cache volume, which starts with the compile cache the
#      image carries (built with --precompile: every stage compiled once, ahead of time,
#      by the image's binary): ready without compiling anything (every `model ready`
#      line says `cached: true` or `shared with a loaded stage`), the digits oracle's first
#      100 requests (tests/e2e checks all 450 per model in-process) answered right by the Rust, Python, JavaScript and three-language models;
#      then SIGTERM: the server drains and exits 0 well within the grace;
#   2. the same volume again: ready from the warm compile cache;
#   3. with --read-only and no volume at all (--image-volume=ignore), serving the digits
#      model alone (nothing to compile for long): it still serves, with the one warning
#      that the compile cache is off.
# Prints the image's size and each start's time. Needs root podman and buildah
# (scripts/toolchains.sh image) and python3.
set -euo pipefail
script=test-image
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/lib/plugins.sh
export CONTAINERS_CONF="$root/scripts/containers.conf"
[[ $EUID -eq 0 ]] || fail "the image test runs podman rootful: run it as root"

# The image is built with build-image.sh's own default name, the one the README runs
# (tensorplug:<version>), so that the command as printed is what is tested; an image of
# that name made before is set aside and put back afterwards.
version="$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "tensorplug"))')"
tag="tensorplug:$version"
kept="tensorplug:kept-by-test-image-$$"
volume="tensorplug-test-cache-$$"
name="tensorplug-test-$$"
had_image=false
cleanup() {
    podman rm -f "$name" >/dev/null 2>&1 || true
    podman volume rm -f "$volume" >/dev/null 2>&1 || true
    podman rmi -f "$tag" >/dev/null 2>&1 || true
    if $had_image; then
        podman tag "$kept" "$tag" >/dev/null 2>&1 || true
        podman rmi "$kept" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT
if podman image exists "$tag"; then
    had_image=true
    podman tag "$tag" "$kept"
fi

cargo build --locked -p tensorplug --bin tensorplug >/dev/null 2>&1 ||
    fail "cargo build -p tensorplug failed"
built="$(./scripts/build-image.sh --binary "$target_dir/debug/tensorplug" --precompile)"
printf 'image: %s\n' "$built"
[[ "${built%% *}" == "$tag" ]] || fail "build-image.sh named the image '${built%% *}', not $tag"

# A free loopback port.
# start PORT PODMAN-ARGS...: starts the container, waits until it is ready; prints the
# seconds it took.
start() {
    local port="$1"
    shift
    podman run -d --name "$name" -p "127.0.0.1:$port:8080" "$@" "$tag" >/dev/null
    wait_ready "$port" || { podman logs "$name" >&2; fail "the container did not become ready"; }
}

# Stops the container with SIGTERM and checks it drained and exited 0 within the grace.
stop() {
    local started ended code
    started="$(date +%s.%N)"
    podman stop -t 30 "$name" >/dev/null
    ended="$(date +%s.%N)"
    code="$(podman inspect "$name" --format '{{.State.ExitCode}}')"
    [[ "$code" == 0 ]] || { podman logs "$name" >&2; fail "SIGTERM: the server exited with $code"; }
    # Read whole first: `grep -q` stopping early would make pipefail see podman's SIGPIPE.
    local log
    log="$(podman logs "$name" 2>&1)"
    grep -q "shutting down: finishing in-flight requests" <<<"$log" || fail "SIGTERM: the server did not drain"
    awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.2f", b - a }'
    podman rm "$name" >/dev/null
}

port="$(free_port)"
podman volume create "$volume" >/dev/null
cold="$(start "$port" --read-only -v "$volume:/var/cache/tensorplug")"
log="$(podman logs "$name" 2>&1)"
grep -q "model ready" <<<"$log" || { echo "$log" >&2; fail "no model ready"; }
if grep "model ready" <<<"$log" | grep -q "cached: \(false\|unknown\)"; then
    echo "$log" >&2
    fail "a load compiled: the image's compile cache did not serve it"
fi
cache="the image's precompiled cache"
python3 - "$port" <<'EOF' || fail "the oracle was not answered right"
import json, sys, urllib.request
port = sys.argv[1]
requests = open("tests/data/digits/test_requests.jsonl").read().splitlines()[:100]
oracle = [json.loads(line)["predict"] for line in open("tests/data/digits/test_oracle.jsonl")][:100]
for model in ["digits", "digits-python", "digits-js", "digits-mixed"]:
    for line, want in zip(requests, oracle):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", line.encode(),
                                         {"content-type": "application/json"})
        answer = json.load(urllib.request.urlopen(request, timeout=30))
        label = next(o for o in answer["outputs"] if o["name"] == "label")["data"][0]
        if label != want:
            sys.exit(f"{model}: {label} where the oracle says {want}")
    print(f"oracle: {model} {len(requests)}/{len(requests)}")
EOF
drained="$(stop)"
echo "read-only root, cache volume: ready in ${cold} s (${cache}); SIGTERM: exit 0 after ${drained} s"

warm="$(start "$port" --read-only -v "$volume:/var/cache/tensorplug")"
drained="$(stop)"
echo "read-only root, cache volume: ready in ${warm} s (warm compile cache); SIGTERM: exit 0 after ${drained} s"

bare="$(start "$port" --read-only --image-volume=ignore -e TENSORPLUG_MODEL_CONTROL=explicit -e TENSORPLUG_LOAD_MODELS=digits)"
log="$(podman logs "$name" 2>&1)"
grep -q "the compile cache is off" <<<"$log" || { echo "$log" >&2; fail "no warning that the compile cache is off"; }
python3 - "$port" <<'EOF' || fail "without a cache volume, digits was not answered"
import json, sys, urllib.request
line = open("tests/data/digits/test_requests.jsonl").readline()
request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v2/models/digits/infer", line.encode(),
                                 {"content-type": "application/json"})
assert json.load(urllib.request.urlopen(request, timeout=30))["outputs"]
EOF
warnings="$(grep -c "the compile cache is off" <<<"$log")"
[[ "$warnings" == 1 ]] || fail "$warnings warnings about the compile cache, not one"
drained="$(stop)"
echo "read-only root, no volume: ready in ${bare} s (compile cache off, one warning); SIGTERM: exit 0 after ${drained} s"
