# Shared by the scripts that build and test plugins in C, C++, Python and JavaScript, and
# the image and rolling-update tests (sourced, not run): the target folder, the tools
# scripts/toolchains.sh installed there, loopback ports and readiness waits,
# and a build that is skipped when nothing it reads has changed — componentize-py and
# componentize-js take 5-15 s per component, and the test command builds every plugin on
# every run.
#
# The caller sets `script` (its name, for messages), cds to the repository's root first,
# and sets `work` (its folder in the target folder) before using `up_to_date`.

fail() {
    printf '%s: %s\n' "$script" "$*" >&2
    exit 1
}

target_dir="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
[[ -n "$target_dir" ]] || fail "no target_directory in cargo metadata"
tools="${TENSORPLUG_TOOLCHAINS:-$target_dir/toolchains}"

# The tool `name` installed by scripts/toolchains.sh, or a loud failure naming the fix.
installed_tool() {
    local name="$1" language="$2"
    [[ -x "$tools/bin/$name" ]] ||
        fail "$tools/bin/$name is missing: install it with ./scripts/toolchains.sh $language"
    echo "$tools/bin/$name"
}

# Whether `artifact` was built from exactly these inputs (files and folders, hashed by
# content, plus the tool's version): then the build is skipped.
inputs_key() {
    { find "$@" -type f -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 | sort -z |
        xargs -0 sha256sum; echo "$tool_version"; } | sha256sum | cut -d' ' -f1
}
up_to_date() {
    local artifact="$1" stamp
    shift
    mkdir -p "$work/stamps"
    stamp="$work/stamps/$(echo "$artifact" | tr '/' '_').inputs"
    [[ -f "$artifact" && -f "$stamp" && "$(cat "$stamp")" == "$(inputs_key "$@")" ]]
}
remember_inputs() {
    local artifact="$1" stamp
    shift
    stamp="$work/stamps/$(echo "$artifact" | tr '/' '_').inputs"
    inputs_key "$@" >"$stamp"
}

copy() {
    local artifact="$1" dest="$2"
    mkdir -p "$(dirname "$dest")"
    cp "$artifact" "$dest"
    printf '%-40s %8d bytes\n' "$dest" "$(wc -c <"$dest")"
}

# A free TCP port on loopback.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_ready PORT [SECONDS]: waits until `GET /v2/health/ready` on loopback PORT answers
# 200 (within SECONDS, default 600); prints the seconds it took, or fails with status 1.
wait_ready() {
    python3 - "$1" "${2:-600}" <<'EOF'
import sys, time, urllib.request
port, within, started = sys.argv[1], float(sys.argv[2]), time.time()
while time.time() - started < within:
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status == 200:
            print(f"{time.time() - started:.1f}")
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.05)
sys.exit(1)
EOF
}
