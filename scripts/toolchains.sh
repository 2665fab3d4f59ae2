#!/usr/bin/env bash
# Installs the toolchains that build the plugins written in languages other than Rust:
#   c    Debian clang-19, lld-19, wasi-libc (wasip1) and the wasm32 compiler runtime;
#        wit-bindgen-cli (crate registry, `c` and `cpp` generators)
#   cpp  the same, plus Debian's wasm32 libc++ and libc++abi
#   python  componentize-py (PyPI), in a virtualenv of python3 (which must have venv)
#   js      @bytecodealliance/componentize-js (npm), with Node.js >= 18 (Debian's nodejs
#           and npm when there is no node)
# and the tests' tools:
#   image     podman, buildah, runc (the container image's build and test)
#   balancer  HAProxy (the rolling-update test)
#   broker    nats-server (the NATS queue edge's tests start it themselves)
# Usage: scripts/toolchains.sh [NAME...]   (no argument: every one above)
# Prints the folder holding the installed command-line tools (wit-bindgen, componentize-py,
# componentize-js) as its last line of stdout; says nothing else unless it installs (one line per step, on stderr) or
# fails (what is missing, on stderr, and a non-zero exit). Called by scripts/test.sh before
# the plugins are built, so a fresh machine (CI) gets everything and a missing tool fails
# loudly instead of skipping a language.
#
# Idempotent and cheap when nothing changed: a Debian package is installed only when its
# pinned version is not (as root, or through sudo); crates go with `cargo install --locked`
# into <cargo target dir>/toolchains and are reinstalled only when the installed version
# differs from the pin; the Python and npm packages likewise into <target>/toolchains/python
# and <target>/toolchains/js. A language is added with a `need_<language>` function below.
#
#   TENSORPLUG_TOOLCHAINS  the folder for cargo-installed tools (default: <target>/toolchains)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Pins. Debian versions as bookworm serves them; the crate versions are the ones the Rust
# guest SDK's bindings come from (wit-bindgen 0.63).
LLVM_DEB_VERSION="1:19.1.7-3~deb12u1"
WASI_LIBC_DEB_VERSION="0.0~git20220510.9886d3d-2"
WIT_BINDGEN_VERSION="0.63.0"
# componentize-py embeds CPython 3.14; componentize-js embeds SpiderMonkey (StarlingMonkey).
COMPONENTIZE_PY_VERSION="0.25.1"
COMPONENTIZE_JS_VERSION="0.23.0"
PODMAN_DEB_VERSION="4.3.1+ds1-8+deb12u1+b3"
BUILDAH_DEB_VERSION="1.28.2+ds1-3+deb12u1+b3"
RUNC_DEB_VERSION="1.1.5+ds1-1+deb12u1"
HAPROXY_DEB_VERSION="2.6.12-1+deb12u3"
NATS_SERVER_DEB_VERSION="2.9.10-1+b3"

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

# Debian packages wanted, as name=version (an empty version: any), crates wanted, as
# name=version:features, and the package-manager tools wanted (python, js).
debs=()
crates=()
scripted=()

need_c() {
    debs+=("clang-19=$LLVM_DEB_VERSION" "lld-19=$LLVM_DEB_VERSION"
        "libclang-rt-19-dev-wasm32=$LLVM_DEB_VERSION" "wasi-libc=$WASI_LIBC_DEB_VERSION")
    crates+=("wit-bindgen-cli=$WIT_BINDGEN_VERSION:c,cpp")
}
need_cpp() {
    need_c
    debs+=("libc++-19-dev-wasm32=$LLVM_DEB_VERSION" "libc++abi-19-dev-wasm32=$LLVM_DEB_VERSION")
}

need_python() {
    scripted+=(python)
}
need_js() {
    # Any Node.js from 18 on: Debian 12 ships 18, other machines bring their own.
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || debs+=("nodejs=" "npm=")
    scripted+=(js)
}

need_image() {
    debs+=("podman=$PODMAN_DEB_VERSION" "buildah=$BUILDAH_DEB_VERSION" "runc=$RUNC_DEB_VERSION")
}
need_balancer() {
    debs+=("haproxy=$HAPROXY_DEB_VERSION")
}
# The queue edge's tests run a real NATS server with JetStream.
need_broker() {
    debs+=("nats-server=$NATS_SERVER_DEB_VERSION")
}

languages=("$@")
[[ ${#languages[@]} -gt 0 ]] || languages=(c cpp python js image balancer broker)
for language in "${languages[@]}"; do
    declare -F "need_$language" >/dev/null || fail "unknown language '$language' (known: c cpp python js image balancer broker)"
    "need_$language"
done

# --- Debian packages ----------------------------------------------------------------------
# Empty when the package is not installed, also when dpkg has never heard of it (dpkg-query
# then fails, which under pipefail would end this script without a word).
installed_version() { { dpkg-query -W -f '${Status} ${Version}\n' "$1" 2>/dev/null || true; } |
    sed -n 's/^install ok installed //p'; }

missing=()
for pinned in $(printf '%s\n' "${debs[@]}" | sort -u); do
    have="$(installed_version "${pinned%%=*}")"
    if [[ -z "${pinned#*=}" ]]; then
        [[ -n "$have" ]] || missing+=("${pinned%%=*}")
    else
        [[ "$have" == "${pinned#*=}" ]] || missing+=("$pinned")
    fi
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
    # Unoptimised (--debug): the crates here are code generators run on a few small WIT
    # files, and an optimised build of one took a minute of a cold CI run.
    cargo install --debug --locked --quiet --force --root "$tools" "$crate" --version "=$version" \
        --no-default-features --features "$features" >"$log" 2>&1 ||
        { cat "$log" >&2; rm -f "$log"; fail "cargo install $crate $version failed (is the crate registry reachable?)"; }
    rm -f "$log"
done

# --- Python and npm packages -----------------------------------------------------------
mkdir -p "$tools/bin"
for language in $(printf '%s\n' "${scripted[@]}" | sort -u); do
    case "$language" in
    python)
        venv="$tools/python"
        if [[ "$("$venv/bin/componentize-py" --version 2>/dev/null)" != "componentize-py $COMPONENTIZE_PY_VERSION" ]]; then
            python3 -c 'import venv, ensurepip' 2>/dev/null ||
                fail "python3 with venv is needed for componentize-py (Debian: apt-get install python3-venv)"
            say "pip install componentize-py $COMPONENTIZE_PY_VERSION into $venv"
            log="$(mktemp)"
            { rm -rf "$venv" && python3 -m venv "$venv" &&
                "$venv/bin/pip" install --quiet --disable-pip-version-check \
                    "componentize-py==$COMPONENTIZE_PY_VERSION"; } >"$log" 2>&1 ||
                { cat "$log" >&2; rm -f "$log"; fail "installing componentize-py failed (is PyPI reachable?)"; }
            rm -f "$log"
        fi
        ln -sfn "$venv/bin/componentize-py" "$tools/bin/componentize-py"
        ;;
    js)
        node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
        [[ "$node_major" -ge 18 ]] || fail "componentize-js needs Node.js 18 or newer (found: $(node --version 2>&1))"
        prefix="$tools/js"
        installed="$(node -p "require('$prefix/node_modules/@bytecodealliance/componentize-js/package.json').version" 2>/dev/null || true)"
        if [[ "$installed" != "$COMPONENTIZE_JS_VERSION" ]]; then
            say "npm install @bytecodealliance/componentize-js $COMPONENTIZE_JS_VERSION into $prefix"
            log="$(mktemp)"
            { rm -rf "$prefix" && mkdir -p "$prefix" && echo '{"private": true}' >"$prefix/package.json" &&
                npm install --prefix "$prefix" --no-audit --no-fund --save-exact \
                    "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION"; } >"$log" 2>&1 ||
                { cat "$log" >&2; rm -f "$log"; fail "installing componentize-js failed (is the npm registry reachable?)"; }
            rm -f "$log"
        fi
        ln -sfn "$prefix/node_modules/.bin/componentize-js" "$tools/bin/componentize-js"
        ;;
    esac
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
    podman) check podman ;;
    buildah) check buildah ;;
    runc) check runc ;;
    haproxy) check haproxy ;;
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
for language in "${scripted[@]}"; do
    case "$language" in
    python) "$tools/bin/componentize-py" --version >/dev/null 2>&1 || fail "$tools/bin/componentize-py does not run" ;;
    js) "$tools/bin/componentize-js" --help >/dev/null 2>&1 || fail "$tools/bin/componentize-js does not run" ;;
    esac
done
echo "$tools/bin"
