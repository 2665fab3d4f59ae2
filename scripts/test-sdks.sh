#!/usr/bin/env bash
# Unit tests of the plugin SDKs in their own languages (the Rust SDK's are cargo tests):
#   sdk/python/tests   under python3, against the bindings componentize-py generates
#   sdk/js/test        under node --test (the host-free half of the SDK)
#   sdk/c, sdk/cpp     scripts/test-c-sdk.sh, natively against fakes of the host's imports
#   scripts/tests      the benchmark figures' plotter, under python3
# Needs the toolchains of scripts/toolchains.sh (scripts/test.sh installs them first).
# Exits non-zero if any fails. Works from any directory.
set -euo pipefail
script=test-sdks
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/lib/plugins.sh
work="$target_dir/script-plugins"
mkdir -p "$work"

componentize_py="$(installed_tool componentize-py python)"
bindings="$work/python-bindings"
rm -rf "$bindings"
said="$("$componentize_py" -d wit -w predictor bindings "$bindings" 2>&1)" ||
    fail "componentize-py bindings failed: $said"
# The virtualenv's interpreter: the Python componentize-py was installed with.
python="$(dirname "$(readlink -f "$componentize_py")")/python"
PYTHONPATH="$bindings:sdk/python" PYTHONDONTWRITEBYTECODE=1 "$python" \
    -m unittest discover -s sdk/python/tests -t sdk/python/tests >"$work/python-sdk-tests.log" 2>&1 ||
    { cat "$work/python-sdk-tests.log" >&2; fail "the Python SDK's tests failed"; }
printf 'python sdk: %s\n' "$(grep -E '^Ran ' "$work/python-sdk-tests.log")" >&2

command -v node >/dev/null 2>&1 || fail "node is missing: install it with ./scripts/toolchains.sh js"
node --test sdk/js/test/ >"$work/js-sdk-tests.log" 2>&1 ||
    { cat "$work/js-sdk-tests.log" >&2; fail "the JavaScript SDK's tests failed"; }
printf 'js sdk: %s\n' "$(grep -E '^# (pass|fail)' "$work/js-sdk-tests.log" | tr '\n' ' ')" >&2

if [[ -x scripts/test-c-sdk.sh ]]; then
    ./scripts/test-c-sdk.sh
fi

# The benchmark figures' plotter (scripts/plot-performance.py), with the Python that runs it.
python3 -m unittest discover -s scripts/tests >"$work/plot-tests.log" 2>&1 ||
    { cat "$work/plot-tests.log" >&2; fail "scripts/plot-performance.py's tests failed"; }
printf 'plot-performance: %s\n' "$(grep -E '^Ran ' "$work/plot-tests.log")" >&2
