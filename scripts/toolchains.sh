#!/usr/bin/env bash
# Installs the toolchains that build the plugins written in languages other than Rust:
#   c    Debian clang-19, lld-19, wasi-libc (wasip1) and the wasm32 compiler runtime;
#        wit-bindgen-cli (crate registry, `c` and `cpp` generators)
#   cpp  the same, plus Debian's wasm32 libc++ and libc++abi
# Usage: scripts/toolchains.sh [LANGUAGE...]   (no argument: every language above)
# Prints the folder holding the installed command-line tools (wit-bindgen) as its last
# line of stdout; says nothing else unless it installs (one line per step, on stderr) or
# fails (what is missing, on stderr, and a non-zero exit). Called by scripts/test.sh before
# the plugins are built, so a fresh machine (CI) gets everything and a missing tool fails
# loudly instead of skipping a language.
#
# Idempotent and cheap when nothing changed: a Debian package is installed only when its
# pinned version is not (as root, or through sudo); crates go with `cargo install --locked`
# into <cargo target dir>/toolchains and are reinstalled only when the installed version
# differs from the pin. A language is added with a `need_<language>` function below.
#
#   TENSORPLUG_TOOLCHAINS  the folder for cargo-installed tools (default: <target>/toolchains)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Pins. Debian versions as bookworm serves them; the crate versions are the ones the Rust
# guest SDK's bindings come from (wit-bindgen 0.63).
LLVM_DEB_VERSION="1:19.1.7-3~deb12u1"
WASI_LIBC_DEB_VERSION="0.0~git20220510.9886d3d-2"
WIT_BINDGEN_VERSION="0.63.0"

fail() {
    printf 'toolchains: %s\n' "$*" >&2
    exit 1
}
say() { printf 'toolchains: %s\n' "$*" >&2; }

tools="${TENSORPLUG_TOOLCHAINS:-}"
if [[ -z "$tools" ]]; then
    tools="$(cd "$root" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/toolchains"
    [[ "$tools" != /toolchains ]] || fail "cargo metadata did not give the target directory; set TENSORPLUG_TOOLCHAINS"
fi

# Debian packages wanted, as name=version, and crates wanted, as name=version:features.
debs=()
crates=()

need_c() {
    debs+=("clang-19=$LLVM_DEB_VERSION" "lld-19=$LLVM_DEB_VERSION"
        "libclang-rt-19-dev-wasm32=$LLVM_DEB_VERSION" "wasi-libc=$WASI_LIBC_DEB_VERSION")
    crates+=("wit-bindgen-cli=$WIT_BINDGEN_VERSION:c,cpp")
}
need_cpp() {
    need_c
    debs+=("libc++-19-dev-wasm32=$LLVM_DEB_VERSION" "libc++abi-19-dev-wasm32=$LLVM_DEB_VERSION")
}

languages=("$@")
[[ ${#languages[@]} -gt 0 ]] || languages=(c cpp)
for language in "${languages[@]}"; do
    declare -F "need_$language" >/dev/null || fail "unknown language '$language' (known: c cpp)"
    "need_$language"
done

# --- Debian packages ----------------------------------------------------------------------
installed_version() { dpkg-query -W -f '${Status} ${Version}\n' "$1" 2>/dev/null |
    sed -n 's/^install ok installed //p'; }

missing=()
for pinned in $(printf '%s\n' "${debs[@]}" | sort -u); do
    [[ "$(installed_version "${pinned%%=*}")" == "${pinned#*=}" ]] || missing+=("$pinned")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null 2>&1 ||
        fail "no apt-get: install these (Debian 12 versions) by hand: ${missing[*]}"
    as_root=()
    if [[ $EUID -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || fail "not root and no sudo: as root run apt-get install ${missing[*]}"
        as_root=(sudo)
    fi
    log="$(mktemp)"
    trap 'rm -f "$log"' EXIT
    apt_install() {
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            "${missing[@]}" >"$log" 2>&1
    }
    say "apt-get install ${missing[*]}"
    # A fresh machine may have no package lists (or stale ones without the pins).
    if ! apt_install; then
        say "apt-get update (the pinned versions were not in the package lists)"
        "${as_root[@]}" apt-get update >"$log" 2>&1 || { cat "$log" >&2; fail "apt-get update failed"; }
        apt_install || { cat "$log" >&2; fail "apt-get install ${missing[*]} failed"; }
    fi
fi

# --- crates -------------------------------------------------------------------------------
mkdir -p "$tools"
# One installer at a time (two test runs sharing a target folder).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$tools/.lock"
    flock 9
fi
for wanted in $(printf '%s\n' "${crates[@]}" | sort -u); do
    crate="${wanted%%=*}" rest="${wanted#*=}"
    version="${rest%%:*}" features="${rest#*:}"
    # `cargo install --list --root` names what is installed there: "crate vX.Y.Z:".
    if cargo install --list --root "$tools" 2>/dev/null | grep -qx "$crate v$version:"; then
        continue
    fi
    say "cargo install $crate $version (features $features) into $tools"
    log="$(mktemp)"
    cargo install --locked --quiet --force --root "$tools" "$crate" --version "=$version" \
        --no-default-features --features "$features" >"$log" 2>&1 ||
        { cat "$log" >&2; rm -f "$log"; fail "cargo install $crate $version failed (is the crate registry reachable?)"; }
    rm -f "$log"
done

# --- the tools must now answer ------------------------------------------------------------
check() { command -v "$1" >/dev/null 2>&1 || [[ -x "$1" ]] || fail "$1 is missing after the install"; }
for pinned in "${debs[@]}"; do
    case "${pinned%%=*}" in
    clang-19) check clang-19 ;;
    lld-19) check wasm-ld-19 ;;
    wasi-libc) [[ -f /usr/include/wasm32-wasi/stdlib.h ]] || fail "wasi-libc's headers are missing" ;;
    libclang-rt-19-dev-wasm32)
        [[ -f /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a ]] ||
            fail "the wasm32 compiler runtime is missing" ;;
    libc++-19-dev-wasm32)
        check clang++-19
        [[ -f /usr/lib/wasm32-wasi/libc++.a ]] || fail "the wasm32 libc++ is missing" ;;
    esac
done
for wanted in "${crates[@]}"; do
    case "${wanted%%=*}" in
    wit-bindgen-cli) "$tools/bin/wit-bindgen" --version >/dev/null 2>&1 || fail "$tools/bin/wit-bindgen does not run" ;;
    esac
done
echo "$tools/bin"
