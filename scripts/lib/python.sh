# Shared by the scripts that keep a virtualenv or a download in the target folder
# (sourced, not run): python-env.sh, minilm.sh, minilm-oracle.sh, onnxruntime.sh,
# bench-embeddings-env.sh.
# The caller sets `root` (the repository) and defines `fail MESSAGE` (prints, exits 1).

# require_python PYTHON WHY: fails unless PYTHON runs and has venv and ensurepip, saying
# WHY Python is needed.
require_python() {
    command -v "$1" >/dev/null 2>&1 ||
        fail "'$1' not found: $2 needs Python 3 with venv and pip (or PYTHON=/path/to/python3)"
    "$1" -c 'import venv, ensurepip' 2>/dev/null ||
        fail "$1 has no venv/ensurepip module (on Debian or Ubuntu: apt-get install python3-venv)"
}

# in_target VARIABLE NAME: the folder the environment variable VARIABLE names, else NAME
# in cargo's target folder (CARGO_TARGET_DIR, then `build.target-dir`, then target/).
in_target() {
    if [[ -n "${!1:-}" ]]; then
        echo "${!1}"
        return
    fi
    local target_dir
    target_dir="$(cd "$root" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    [[ -n "$target_dir" ]] || fail "cargo metadata did not give the target directory; set $1"
    echo "$target_dir/$2"
}

# venv_current VENV KEY: whether VENV was built from KEY (its stamp file says so) and its
# python runs.
venv_current() {
    [[ -f "$1/.tensorplug-requirements" && "$(cat "$1/.tensorplug-requirements")" == "$2" ]] &&
        "$1/bin/python" -c '' 2>/dev/null
}

# one_builder LOCKFILE: waits until no other run holds LOCKFILE, and holds it (descriptor 9)
# until this script exits: two runs sharing a target folder build one at a time.
one_builder() {
    mkdir -p "$(dirname "$1")"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$1"
        flock 9
    fi
}

# refuse_non_venv VENV: fails if VENV exists, is not empty and is not a virtualenv (it is
# about to be replaced).
refuse_non_venv() {
    if [[ -e "$1" && ! -f "$1/pyvenv.cfg" && -n "$(ls -A "$1")" ]]; then
        fail "$1 exists and is not a virtualenv: refusing to replace it"
    fi
}

# new_venv PYTHON VENV: VENV made afresh by PYTHON (what went wrong is printed on failure).
new_venv() {
    local output
    rm -rf "$2"
    output="$("$1" -m venv "$2" 2>&1)" || {
        printf '%s\n' "$output" >&2
        fail "'$1 -m venv $2' failed"
    }
}
