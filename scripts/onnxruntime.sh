#!/usr/bin/env bash
# ONNX Runtime's shared library, for the host's wasi:nn onnxruntime backend (e.g.
# TENSORPLUG_ONNXRUNTIME_LIB="$(scripts/onnxruntime.sh)" in scripts/serve-example.sh).
# Prints the library's absolute path as its last line of stdout; says nothing else unless
# it downloads (one line on stderr) or fails (`onnxruntime: ...` on stderr, non-zero exit).
#
# The library comes from PyPI's onnxruntime 1.32.0 wheel for CPython 3.11 on x86-64
# Linux (manylinux_2_28), pinned by its sha256 below: pip downloads the wheel (27 MB)
# whatever the local Python's version, since the library inside does not use Python,
# and only onnxruntime/capi/libonnxruntime.so.1.32.0 is taken out of it. That library
# needs nothing else from the wheel: its dependencies are glibc's and libstdc++ (its
# RUNPATH $ORIGIN is only for libonnxruntime_providers_shared.so, which non-CPU
# execution providers load, and this wheel has none). Idempotent and cheap: nothing is
# done when the library is there. Works from any directory.
#
#   TENSORPLUG_ONNXRUNTIME_DIR  where the wheel and the library go
#                               (default: <cargo target dir>/onnxruntime)
#   PYTHON                      the interpreter whose pip downloads (default: python3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
version=1.32.0
wheel="onnxruntime-$version-cp311-cp311-manylinux_2_28_x86_64.whl"
sha256=5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d
member="onnxruntime/capi/libonnxruntime.so.$version"

fail() {
    printf 'onnxruntime: %s\n' "$*" >&2
    exit 1
}

source "$root/scripts/lib/python.sh"
dir="$(in_target TENSORPLUG_ONNXRUNTIME_DIR onnxruntime)"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
library="$dir/libonnxruntime.so.$version"

if [[ ! -f "$library" ]]; then
    [[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] ||
        fail "the pinned wheel is for Linux on x86-64, not $(uname -s)/$(uname -m): set TENSORPLUG_ONNXRUNTIME_LIB to a libonnxruntime.so.$version of your own"
    command -v "$python" >/dev/null 2>&1 ||
        fail "'$python' not found: downloading ONNX Runtime needs Python 3 with pip (or PYTHON=/path/to/python3)"
    "$python" -m pip --version >/dev/null 2>&1 ||
        fail "$python has no pip (on Debian or Ubuntu: apt-get install python3-pip)"
    # One downloader at a time (two runs sharing a target folder).
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$dir/.lock"
        flock 9
    fi
    if [[ ! -f "$library" ]]; then
        echo "onnxruntime: downloading onnxruntime==$version from PyPI (27 MB) into $dir" >&2
        work="$(mktemp -d "$dir/.download.XXXXXX")"
        trap 'rm -rf "$work"' EXIT
        # --hash is only accepted in a requirements file.
        printf 'onnxruntime==%s --hash=sha256:%s\n' "$version" "$sha256" >"$work/requirements.txt"
        "$python" -m pip download --disable-pip-version-check --no-input --quiet --no-deps \
            --only-binary=:all: --require-hashes --implementation cp --python-version 3.11 --abi cp311 \
            --platform manylinux_2_28_x86_64 --dest "$work" --requirement "$work/requirements.txt" \
            >"$work/log" 2>&1 || {
            cat "$work/log" >&2
            fail "pip could not download onnxruntime==$version (is PyPI reachable?)"
        }
        [[ -f "$work/$wheel" ]] || fail "pip did not download $wheel"
        "$python" - "$work/$wheel" "$member" "$library" <<'EOF' || fail "could not extract $member from $wheel"
import os, shutil, sys, zipfile
wheel, member, library = sys.argv[1:]
partial = library + ".partial"
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(partial, "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(partial, 0o755)
os.replace(partial, library)
EOF
    fi
fi
echo "$library"
