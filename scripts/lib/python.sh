# Shared by the scripts that keep a virtualenv or a download in the target folder
# (sourced, not run): python-env.sh, minilm.sh, onnxruntime.sh, bench-embeddings-env.sh.
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
