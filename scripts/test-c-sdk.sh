#!/usr/bin/env bash
# Unit tests of the C and C++ SDKs (sdk/c/tensorplug.h, sdk/cpp/tensorplug.hpp), built
# natively for this machine: sdk/c/test/tensorplug_test.c and
# sdk/cpp/test/tensorplug_test.cpp, over the types of the bindings `wit-bindgen c|cpp`
# generates for the predictor world, with the bindings' imports faked in the tests. Run
# under AddressSanitizer (leaks included) and UBSan: clang-19's when its runtime is
# installed (Debian libclang-rt-19-dev), else gcc's; without either the tests still run,
# and the script says loudly that ownership mistakes can go unnoticed.
#
# Needs clang-19 (or gcc) and the wit-bindgen of scripts/toolchains.sh c; without them
# this fails and says what is missing. Prints one summary line; exits non-zero on any
# failure. Works from any directory; takes a few seconds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

script=test-c-sdk
source scripts/lib/plugins.sh
wit_bindgen="$tools/bin/wit-bindgen"
[[ -x "$wit_bindgen" ]] ||
    fail "$wit_bindgen is missing: install the C and C++ toolchains with ./scripts/toolchains.sh c cpp"

work="$target_dir/c-sdk-test"
rm -rf "$work"
mkdir -p "$work"
for language in c cpp; do
    said="$("$wit_bindgen" "$language" wit --world predictor --out-dir "$work/gen-$language" 2>&1)" ||
        fail "wit-bindgen $language failed: $said"
done

# The first compiler pair whose sanitizer runtime links and runs here.
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
probe="$work/probe.c"
printf '#include <stdlib.h>\nint main(void) { free(malloc(1)); return 0; }\n' >"$probe"
cc="" cxx="" flags=()
for pair in "clang-19 clang++-19" "gcc g++"; do
    read -r c cpp <<<"$pair"
    command -v "$c" >/dev/null 2>&1 && command -v "$cpp" >/dev/null 2>&1 || continue
    if "$c" "${sanitize[@]}" -o "$work/probe" "$probe" >/dev/null 2>&1 && "$work/probe"; then
        cc="$c" cxx="$cpp" flags=("${sanitize[@]}")
        break
    fi
done
if [[ -z "$cc" ]]; then
    command -v clang-19 >/dev/null 2>&1 && command -v clang++-19 >/dev/null 2>&1 ||
        fail "clang-19 and clang++-19 are missing: install the C and C++ toolchains with ./scripts/toolchains.sh c cpp"
    cc=clang-19 cxx=clang++-19
    printf '%s\n' "test-c-sdk: WARNING: no AddressSanitizer/UBSan runtime (install libclang-rt-19-dev):" \
        "test-c-sdk: WARNING: the SDK tests run without them, so ownership mistakes can go unnoticed" >&2
fi

common=(-g -O0 -Wall -Wextra -Werror "${flags[@]}")
# Both at once: the C++ one (sanitized libstdc++ templates) takes most of the time.
"$cc" -std=c17 "${common[@]}" -I"$work/gen-c" -Isdk/c -o "$work/c-test" sdk/c/test/tensorplug_test.c &
c_build=$!
"$cxx" -std=c++23 -fno-exceptions "${common[@]}" -I"$work/gen-cpp" -Isdk/cpp -o "$work/cpp-test" \
    sdk/cpp/test/tensorplug_test.cpp || fail "the C++ SDK tests do not compile ($cxx)"
wait "$c_build" || fail "the C SDK tests do not compile ($cc)"
c_said="$("$work/c-test")" || fail "$c_said"
cpp_said="$("$work/cpp-test")" || fail "$cpp_said"
printf 'test-c-sdk: %s; %s (%s, %s)\n' "$c_said" "$cpp_said" "$cc" "${flags[*]:-no sanitizers}"
