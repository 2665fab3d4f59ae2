#!/usr/bin/env bash
# Builds the plugin into the model folder models/{{name}}/: one component per stage, made by
# componentize-js 0.23.0 (the tensorplug repository's scripts/toolchains.sh js installs it;
# or `npm install @bytecodealliance/componentize-js@0.23.0`). componentize-js resolves
# imports in the folder it runs in, so each stage is built in build/ beside a copy of the
# SDK. Override where things are with COMPONENTIZE_JS, TENSORPLUG_WIT (the WIT folder)
# and TENSORPLUG_SDK (the folder of tensorplug.js).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
componentize_js="${COMPONENTIZE_JS:-{{componentize_js}}}"
wit="$(cd "${TENSORPLUG_WIT:-{{wit}}}" && pwd)"
sdk="${TENSORPLUG_SDK:-{{sdk}}}"
command -v "$componentize_js" >/dev/null 2>&1 ||
    { echo "build.sh: $componentize_js not found (set COMPONENTIZE_JS)" >&2; exit 1; }

rm -rf build && mkdir -p build
cp "$sdk"/tensorplug.js "$sdk"/tensors.js build/
# One stage: `source` as a component of `world`. `-d http fetch-event` leaves out the
# wasi:http handler, which tensorplug does not provide (plugins have no network).
stage() {
    local world="$1" source="$2" stage="$3"
    local said
    cp "$source" build/
    said="$(cd build && "$componentize_js" --wit "$wit" --world-name "$world" -d http fetch-event \
        -o "../models/{{name}}/$stage.wasm" "$source" 2>&1)" ||
        { echo "build.sh: componentize-js failed: $said" >&2; exit 1; }
    echo "built models/{{name}}/$stage.wasm"
}
{{stage_lines}}
