#!/usr/bin/env bash
# Offline validation of deploy/: every Kubernetes manifest of deploy/kubernetes/ through
# `kubernetes-validate --strict` against the pinned Kubernetes version (unknown fields are
# errors), and the KServe resources of deploy/kserve/ against the kserve SDK's models
# (deploy/validate_kserve.py: kubernetes-validate has no schemas for KServe's CRDs).
# Prints one line per resource; exits non-zero if any is invalid.
#
# The validators live in a virtualenv made once from deploy/requirements.txt, in
# <cargo target dir>/deploy-env (or TENSORPLUG_DEPLOY_ENV), and made again only when the
# requirements or the interpreter change (their hash is its stamp). A warm run takes a
# few seconds. PYTHON: the interpreter to make it with (default: python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
kubernetes_version=1.33.0
requirements=deploy/requirements.txt
python="${PYTHON:-python3}"

if [[ -z "${TENSORPLUG_DEPLOY_ENV:-}" ]]; then
    target_dir="$(cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    TENSORPLUG_DEPLOY_ENV="$target_dir/deploy-env"
fi
env_dir="$TENSORPLUG_DEPLOY_ENV"
wanted="$(sha256sum "$requirements" | cut -d' ' -f1) $("$python" -c 'import sys; print(sys.version.split()[0], sys.executable)')"
if [[ "$(cat "$env_dir/.requirements-hash" 2>/dev/null)" != "$wanted" ]] || ! "$env_dir/bin/python" -c '' 2>/dev/null; then
    mkdir -p "$(dirname "$env_dir")"
    exec 9>"$env_dir.lock"
    flock 9 # one installer at a time; the loser finds the stamp written
    if [[ "$(cat "$env_dir/.requirements-hash" 2>/dev/null)" != "$wanted" ]]; then
        echo "validate-manifests: installing $requirements into $env_dir (downloads from PyPI)" >&2
        log="$(mktemp)"
        trap 'rm -f "$log"' EXIT
        rm -rf "$env_dir"
        if ! { "$python" -m venv "$env_dir" &&
            "$env_dir/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
                --requirement "$requirements"; } >"$log" 2>&1; then
            cat "$log" >&2
            echo "validate-manifests: could not make $env_dir (python3-venv installed? PyPI reachable?)" >&2
            exit 1
        fi
        printf '%s\n' "$wanted" >"$env_dir/.requirements-hash"
    fi
fi

status=0
# The resources only: kustomization.yaml is kustomize's, not the API server's.
mapfile -t manifests < <(find deploy/kubernetes -name '*.yaml' ! -name kustomization.yaml | sort)
# One line per resource (sed ends its last line, which it leaves open).
"$env_dir/bin/kubernetes-validate" --strict --kubernetes-version "$kubernetes_version" "${manifests[@]}" |
    sed -e '$a\' || status=1
"$env_dir/bin/python" deploy/validate_kserve.py deploy/kserve/*.yaml || status=1
if ((status == 0)); then
    echo "validate-manifests: ${#manifests[@]} Kubernetes $kubernetes_version manifests and $(ls deploy/kserve/*.yaml | wc -l) KServe files valid"
fi
exit "$status"
