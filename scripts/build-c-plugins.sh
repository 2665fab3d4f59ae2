#!/usr/bin/env bash
# Builds the C and C++ example plugins as wasm32-wasip1 reactor modules (the host makes
# them components at load) and copies them into their model folders:
#   examples/digits-c/predict.c      -> examples/models/digits-c/predict.wasm
#   examples/digits-cpp/predict.cpp  -> examples/models/digits-cpp/predict.wasm
#   examples/digits-mixed/preprocess.c -> examples/models/digits-mixed/preprocess.wasm
#   tests/plugins/faulty-c/faulty.c   -> tests/models/faulty-c/predict.wasm
#   tests/plugins/faulty-c/faulty.cpp -> tests/models/faulty-cpp/predict.wasm
# The model folders' Rust stages come from scripts/build-plugins.sh, which calls this
# script after building them. Bindings come from `wit-bindgen c|cpp` over wit/ into
# <target>/c-plugins/, the SDK headers from sdk/c and sdk/cpp.
#
# Needs the toolchains of scripts/toolchains.sh (scripts/test.sh installs them first);
# without them this fails and says so. Works from any directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

script=build-c-plugins
source scripts/lib/plugins.sh
wit_bindgen="$tools/bin/wit-bindgen"
for tool in "$wit_bindgen" clang-19 clang++-19 wasm-ld-19; do
    command -v "$tool" >/dev/null 2>&1 ||
        fail "$tool is missing: install the C and C++ toolchains with ./scripts/toolchains.sh c cpp"
done
[[ -f /usr/include/wasm32-wasi/stdlib.h ]] ||
    fail "wasi-libc is missing: install the C and C++ toolchains with ./scripts/toolchains.sh c cpp"

work="$target_dir/c-plugins"
# Bindings of one world in one language, regenerated every build (milliseconds).
bindings() {
    local language="$1" world="$2" dir="$work/gen-$1/$2"
    local said
    rm -rf "$dir"
    said="$("$wit_bindgen" "$language" wit --world "$world" --out-dir "$dir" 2>&1)" ||
        fail "wit-bindgen $language --world $world failed: $said"
    echo "$dir"
}

# Flags of every C and C++ plugin: a reactor (init and predict are called, there is no
# main); simd128 as for the Rust plugins; no debug info, which wasi-libc's libc.a carries
# and would triple the size.
flags=(--target=wasm32-wasi -mexec-model=reactor -O2 -msimd128 -Wall -Wextra -Werror -Wl,--strip-debug)

mkdir -p "$work"
gen="$(bindings c predictor)"
clang-19 "${flags[@]}" -std=c17 -I"$gen" -Isdk/c -o "$work/digits-c-predict.wasm" \
    examples/digits-c/predict.c "$gen/predictor.c" "$gen/predictor_component_type.o" -lm
copy "$work/digits-c-predict.wasm" examples/models/digits-c/predict.wasm
clang-19 "${flags[@]}" -std=c17 -I"$gen" -Isdk/c -o "$work/faulty-c.wasm" \
    tests/plugins/faulty-c/faulty.c "$gen/predictor.c" "$gen/predictor_component_type.o"
copy "$work/faulty-c.wasm" tests/models/faulty-c/predict.wasm
# Each ```LANGUAGE block of README (each a whole plugin) into $work/readme-LANGUAGE-N.EXT;
# prints the files.
readme_examples() {
    local language="$1" readme="$2" ext="$3"
    rm -f "$work/readme-$language-"*."$ext"
    awk -v lang="$language" -v out="$work/readme-$language-" -v ext="$ext" '
        $0 == "```" lang { on = 1; n++; next }
        /^```$/ && on { on = 0; next }
        on { print > (out n "." ext) }' "$readme"
    ls "$work/readme-$language-"*."$ext" 2>/dev/null ||
        fail "$readme has no \`\`\`$language example"
}
# The SDK's README examples, compiled so that they stay correct.
examples="$(readme_examples c sdk/c/README.md c)"
for example in $examples; do
    clang-19 "${flags[@]}" -std=c17 -I"$gen" -Isdk/c -o "${example%.c}.wasm" \
        "$example" "$gen/predictor.c" "$gen/predictor_component_type.o"
done

gen="$(bindings c preprocessor)"
clang-19 "${flags[@]}" -std=c17 -I"$gen" -Isdk/c -o "$work/digits-mixed-preprocess.wasm" \
    examples/digits-mixed/preprocess.c "$gen/preprocessor.c" "$gen/preprocessor_component_type.o" -lm
copy "$work/digits-mixed-preprocess.wasm" examples/models/digits-mixed/preprocess.wasm

gen="$(bindings cpp predictor)"
clang++-19 "${flags[@]}" -std=c++23 -fno-exceptions -I"$gen" -Isdk/cpp -o "$work/digits-cpp-predict.wasm" \
    examples/digits-cpp/predict.cpp "$gen/predictor.cpp" "$gen/predictor_component_type.o"
copy "$work/digits-cpp-predict.wasm" examples/models/digits-cpp/predict.wasm
clang++-19 "${flags[@]}" -std=c++23 -fno-exceptions -I"$gen" -Isdk/cpp -o "$work/faulty-cpp.wasm" \
    tests/plugins/faulty-c/faulty.cpp "$gen/predictor.cpp" "$gen/predictor_component_type.o"
copy "$work/faulty-cpp.wasm" tests/models/faulty-cpp/predict.wasm
examples="$(readme_examples cpp sdk/cpp/README.md cpp)"
for example in $examples; do
    clang++-19 "${flags[@]}" -std=c++23 -fno-exceptions -I"$gen" -Isdk/cpp -o "${example%.cpp}.wasm" \
        "$example" "$gen/predictor.cpp" "$gen/predictor_component_type.o"
done
