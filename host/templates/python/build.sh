#!/usr/bin/env bash
# Builds the plugin into the model folder models/{{name}}/: one component per stage, made by
# componentize-py 0.25.1 (the tensorplug repository's scripts/toolchains.sh python installs
# it; or `pip install componentize-py==0.25.1`) with the SDK on the module path. Override
# where things are with COMPONENTIZE_PY, TENSORPLUG_WIT (the WIT folder) and
# TENSORPLUG_SDK (the folder holding the `tensorplug` package).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
componentize_py="${COMPONENTIZE_PY:-{{componentize_py}}}"
wit="${TENSORPLUG_WIT:-{{wit}}}"
sdk="${TENSORPLUG_SDK:-{{sdk}}}"
command -v "$componentize_py" >/dev/null 2>&1 ||
    { echo "build.sh: $componentize_py not found (set COMPONENTIZE_PY)" >&2; exit 1; }

# One stage: the module `module` (this folder's module.py) as a component of `world`.
stage() {
    local world="$1" module="$2" stage="$3"
    local said
    said="$("$componentize_py" -d "$wit" -w "$world" componentize -p . -p "$sdk" "$module" \
        -o "models/{{name}}/$stage.wasm" 2>&1)" || { echo "build.sh: componentize-py failed: $said" >&2; exit 1; }
    echo "built models/{{name}}/$stage.wasm"
}
{{stage_lines}}
