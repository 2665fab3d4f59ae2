#!/usr/bin/env bash
# The Python virtualenv of the embeddings benchmark (scripts/bench-embeddings.py): ONNX
# Runtime, torch, sentence-transformers and infinity-emb on the CPU, as
# scripts/bench-embeddings-requirements.txt pins them, plus the ceiling's own tokenizers
# (scripts/bench-embeddings-ceiling-requirements.txt, installed apart into
# <virtualenv>/ceiling-site: see that file for why). Prints the virtualenv's python as its
# last line of stdout; says nothing else unless it installs (a line on stderr) or fails
# (what failed, on stderr, and a non-zero exit).
#
# Idempotent and cheap when nothing changed: the virtualenv is (re)built only when either
# requirements file or the Python interpreter changed (a stamp file holds their hash), or
# when it is missing or broken. PyPI's torch is its CUDA build: a cold install downloads
# about 3 GB and takes 5.6 GB on disk (under three minutes with a fast link to PyPI); delete
# the folder when done. Works from any directory.
#
#   TENSORPLUG_BENCH_EMBEDDINGS_ENV  the virtualenv's folder
#                                    (default: <cargo target dir>/bench-embeddings-env)
#   PYTHON                           the interpreter to build it with (default: python3;
#                                    the pins are for CPython 3.11)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$root/scripts/bench-embeddings-requirements.txt"
ceiling_requirements="$root/scripts/bench-embeddings-ceiling-requirements.txt"
python="${PYTHON:-python3}"

fail() {
    printf 'bench-embeddings-env: %s\n' "$*" >&2
    exit 1
}

source "$root/scripts/lib/python.sh"
require_python "$python" "the benchmark (CPython 3.11)"
venv="$(in_target TENSORPLUG_BENCH_EMBEDDINGS_ENV bench-embeddings-env)"
stamp="$venv/.tensorplug-requirements"

# What the virtualenv was built from: both requirements files and the interpreter.
key="$("$python" - "$requirements" "$ceiling_requirements" <<'EOF'
import hashlib, sys
digest = hashlib.sha256()
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        digest.update(hashlib.sha256(f.read()).digest())
print(digest.hexdigest(), sys.version.split()[0], sys.executable)
EOF
)" || fail "could not read $requirements or $ceiling_requirements"

if ! venv_current "$venv" "$key"; then
    one_builder "$venv.lock"
    if ! venv_current "$venv" "$key"; then
        refuse_non_venv "$venv"
        "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
            echo "bench-embeddings-env: warning: the pins are for CPython 3.11, $python is $("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" >&2
        echo "bench-embeddings-env: installing torch, sentence-transformers, onnxruntime and infinity-emb into $venv (about 3 GB from PyPI)" >&2
        log="$(mktemp)"
        trap 'rm -f "$log"' EXIT
        new_venv "$python" "$venv"
        nice -n 10 "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
            --only-binary=:all: --requirement "$requirements" >"$log" 2>&1 || {
            cat "$log" >&2
            fail "pip could not install ${requirements#"$root"/} into $venv (is PyPI reachable?)"
        }
        nice -n 10 "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
            --only-binary=:all: --no-deps --target "$venv/ceiling-site" \
            --requirement "$ceiling_requirements" >"$log" 2>&1 || {
            cat "$log" >&2
            fail "pip could not install ${ceiling_requirements#"$root"/} into $venv/ceiling-site"
        }
        "$venv/bin/python" -m pip check >"$log" 2>&1 || {
            cat "$log" >&2
            fail "the packages in $venv do not fit together (pip check)"
        }
        printf '%s\n' "$key" >"$stamp"
    fi
fi
echo "$venv/bin/python"
