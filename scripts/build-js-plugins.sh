#!/usr/bin/env bash
# Builds the JavaScript plugins as components with componentize-js and the SDK (sdk/js),
# and copies them into their model folders:
#   examples/digits-js/predict.js          -> examples/models/digits-js/predict.wasm
#   examples/digits-mixed/postprocess.js   -> examples/models/digits-mixed/postprocess.wasm
#   tests/plugins/faulty-js/faulty.js      -> tests/models/faulty-js/predict.wasm
# and compiles the SDK README's example, so that it stays correct. A component whose
# sources, SDK, WIT and componentize-js version did not change is not rebuilt.
#
# componentize-js resolves a plugin's relative imports (the SDK) from the folder it runs
# in, which must hold both: this script runs it from the repository's root. `-d http
# fetch-event` leaves out the `wasi:http` handler that the host does not provide.
#
# Needs componentize-js from scripts/toolchains.sh js (scripts/test.sh installs it first);
# without it this fails and says so. Works from any directory.
set -euo pipefail
script=build-js-plugins
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/lib/plugins.sh
work="$target_dir/script-plugins"

componentize_js="$(installed_tool componentize-js js)"
tool_version="componentize-js $(node -p "require('$tools/js/node_modules/@bytecodealliance/componentize-js/package.json').version")"

# component WORLD SOURCE OUTPUT: the module SOURCE (relative to the root) as a component of WORLD.
component() {
    local world="$1" source="$2" out="$3" said
    if up_to_date "$out" "$source" sdk/js wit; then
        return
    fi
    mkdir -p "$(dirname "$out")"
    said="$("$componentize_js" --wit wit --world-name "$world" -d http fetch-event -o "$out" "$source" 2>&1)" ||
        fail "componentize-js ($world, $source) failed: $said"
    remember_inputs "$out" "$source" sdk/js wit
}

component predictor examples/digits-js/predict.js "$work/digits-js-predict.wasm"
copy "$work/digits-js-predict.wasm" examples/models/digits-js/predict.wasm
component postprocessor examples/digits-mixed/postprocess.js "$work/digits-mixed-postprocess.wasm"
copy "$work/digits-mixed-postprocess.wasm" examples/models/digits-mixed/postprocess.wasm
component predictor tests/plugins/faulty-js/faulty.js "$work/faulty-js.wasm"
copy "$work/faulty-js.wasm" tests/models/faulty-js/predict.wasm

# The SDK README's example (its first ```js block), in a folder of its own beside a copy
# of the SDK, so that its import of './tensorplug.js' resolves.
readme="$work/readme-js"
rm -rf "$readme" && mkdir -p "$readme"
cp sdk/js/*.js "$readme/"
awk '/^```js$/ { on = 1; next } /^```$/ && on { exit } on' sdk/js/README.md >"$readme/app.js"
[[ -s "$readme/app.js" ]] || fail "sdk/js/README.md has no \`\`\`js example"
if ! up_to_date "$work/readme-js.wasm" "$readme" wit; then
    said="$(cd "$readme" && "$componentize_js" --wit "$root/wit" --world-name predictor -d http fetch-event \
        -o "$work/readme-js.wasm" app.js 2>&1)" || fail "componentize-js (sdk/js/README.md's example) failed: $said"
    remember_inputs "$work/readme-js.wasm" "$readme" wit
fi
