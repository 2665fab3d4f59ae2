#!/usr/bin/env bash
# Builds the Python plugins as components with componentize-py and the SDK (sdk/python),
# and copies them into their model folders:
#   examples/digits-python/predict.py  -> examples/models/digits-python/predict.wasm
#                                         and examples/models/digits-mixed/predict.wasm
#   tests/plugins/faulty-python/faulty.py -> tests/models/faulty-python/predict.wasm
# and compiles the SDK README's example, so that it stays correct. A component whose
# sources, SDK, WIT and componentize-py version did not change is not rebuilt.
#
# Needs componentize-py from scripts/toolchains.sh python (scripts/test.sh installs it
# first); without it this fails and says so. Works from any directory.
set -euo pipefail
script=build-python-plugins
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/lib/plugins.sh
work="$target_dir/script-plugins"

componentize_py="$(installed_tool componentize-py python)"
tool_version="$("$componentize_py" --version)"

# component WORLD SOURCE_DIR MODULE OUTPUT: the module `MODULE` of SOURCE_DIR (with the SDK
# on the path) as a component of WORLD.
component() {
    local world="$1" dir="$2" module="$3" out="$4" said
    if up_to_date "$out" "$dir" sdk/python wit; then
        return
    fi
    mkdir -p "$(dirname "$out")"
    said="$("$componentize_py" -d wit -w "$world" componentize -p "$dir" -p sdk/python "$module" -o "$out" 2>&1)" ||
        fail "componentize-py ($world, $dir/$module.py) failed: $said"
    remember_inputs "$out" "$dir" sdk/python wit
}

component predictor examples/digits-python predict "$work/digits-python-predict.wasm"
copy "$work/digits-python-predict.wasm" examples/models/digits-python/predict.wasm
copy "$work/digits-python-predict.wasm" examples/models/digits-mixed/predict.wasm
component predictor tests/plugins/faulty-python faulty "$work/faulty-python.wasm"
copy "$work/faulty-python.wasm" tests/models/faulty-python/predict.wasm

# The SDK README's example (its first ```python block).
mkdir -p "$work/readme-python"
awk '/^```python$/ { on = 1; next } /^```$/ && on { exit } on' sdk/python/README.md >"$work/readme-python/app.py"
[[ -s "$work/readme-python/app.py" ]] || fail "sdk/python/README.md has no \`\`\`python example"
component predictor "$work/readme-python" app "$work/readme-python.wasm"
