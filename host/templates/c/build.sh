#!/usr/bin/env bash
# Builds the {{stage}} stage into the model folder models/{{name}}/: a wasm32-wasip1
# reactor module, which the host makes a component at load. Needs clang-19, wasm-ld-19,
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
"$wit_bindgen" {{bindgen_lang}} "$wit" --world {{world}} --out-dir build/gen >/dev/null
# A reactor (init and the stage are called, there is no main); no debug info, which
# wasi-libc's libc.a carries and would triple the size.
{{compiler}} --target=wasm32-wasi -mexec-model=reactor -O2 -msimd128 -Wall -Wextra -Werror -Wl,--strip-debug \
    {{std}} -Ibuild/gen -I"$sdk" -o build/{{stage}}.wasm \
    {{source}} build/gen/{{world}}.{{ext}} build/gen/{{world}}_component_type.o
cp build/{{stage}}.wasm models/{{name}}/{{stage}}.wasm
echo "built models/{{name}}/{{stage}}.wasm"
