#!/usr/bin/env bash
# Builds the plugin into the model folder models/{{name}}/: wasm32-wasip1 reactor
# modules, which the host makes components at load. Needs clang-19, wasm-ld-19,
# wasi-libc{{cpp_needs}} (the tensorplug repository's scripts/toolchains.sh installs them)
# and wit-bindgen 0.63. Override where things are with WIT_BINDGEN, TENSORPLUG_WIT (the
# WIT folder) and TENSORPLUG_SDK (the folder of {{header}}).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
wit_bindgen="${WIT_BINDGEN:-{{wit_bindgen}}}"
wit="${TENSORPLUG_WIT:-{{wit}}}"
sdk="${TENSORPLUG_SDK:-{{sdk}}}"
command -v "$wit_bindgen" >/dev/null 2>&1 || { echo "build.sh: $wit_bindgen not found (set WIT_BINDGEN)" >&2; exit 1; }

rm -rf build && mkdir -p build
# One stage: the bindings of its world, then a reactor (init and the stage are called,
# there is no main) without debug info (wasi-libc's carries it and would triple the size).
stage() {
    local world="$1" source="$2" stage="$3"
    local said
    said="$("$wit_bindgen" {{bindgen_lang}} "$wit" --world "$world" --out-dir "build/$world" 2>&1)" ||
        { echo "build.sh: wit-bindgen failed: $said" >&2; exit 1; }
    {{compiler}} --target=wasm32-wasi -mexec-model=reactor -O2 -msimd128 -Wall -Wextra -Werror -Wl,--strip-debug \
        {{std}} -I"build/$world" -I"$sdk" -o "build/$stage.wasm" \
        "$source" "build/$world/$world.{{ext}}" "build/$world/${world}_component_type.o"
    cp "build/$stage.wasm" "models/{{name}}/$stage.wasm"
    echo "built models/{{name}}/$stage.wasm"
}
{{stage_lines}}
