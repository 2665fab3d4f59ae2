#!/usr/bin/env bash
# The Python virtualenv of the conformance test (tests/conformance/): the unmodified V2
# clients from PyPI, as tests/conformance/requirements.txt pins them. Prints the
# virtualenv's python as its last line of stdout; says nothing else unless it installs
# (one line on stderr) or fails (what failed, on stderr, and a non-zero exit).
#
# Idempotent and cheap when nothing changed: the virtualenv is (re)built only when the
# requirements file or the Python interpreter changed (a stamp file holds the hash of
# both), or when it is missing or broken. The first run downloads the packages (about
# 500 MB installed, one to two minutes). Works from any directory.
#
#   TENSORPLUG_PYTHON_ENV  the virtualenv's folder (default: <cargo target dir>/python-env)
#   PYTHON                 the interpreter to build it with (default: python3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$root/tests/conformance/requirements.txt"
python="${PYTHON:-python3}"

fail() {
    printf 'python-env: %s\n' "$*" >&2
    exit 1
}

source "$root/scripts/lib/python.sh"
require_python "$python" "the conformance test"
venv="$(in_target TENSORPLUG_PYTHON_ENV python-env)"
stamp="$venv/.tensorplug-requirements"

# What the virtualenv was built from: the requirements' hash and the interpreter.
key="$("$python" - "$requirements" <<'EOF'
import hashlib, sys
with open(sys.argv[1], "rb") as f:
    print(hashlib.sha256(f.read()).hexdigest(), sys.version.split()[0], sys.executable)
EOF
)" || fail "could not read $requirements"

if ! venv_current "$venv" "$key"; then
    one_builder "$venv.lock"
    if ! venv_current "$venv" "$key"; then
        refuse_non_venv "$venv"
        echo "python-env: installing ${requirements#"$root"/} into $venv (downloads from PyPI)" >&2
        log="$(mktemp)"
        trap 'rm -f "$log"' EXIT
        new_venv "$python" "$venv"
        # --no-cache-dir: the virtualenv is the cache; a second copy of the wheels under
        # ~/.cache only takes disk (a CI run once failed here on a full disk).
        "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet --no-cache-dir \
            --requirement "$requirements" >"$log" 2>&1 || {
            cat "$log" >&2
            fail "pip could not install $requirements into $venv (pip's error is above: is PyPI reachable? is the disk full?)"
        }
        printf '%s\n' "$key" >"$stamp"
    fi
fi
echo "$venv/bin/python"
