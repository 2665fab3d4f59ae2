#!/usr/bin/env bash
# Offline validation of deploy/: every Kubernetes manifest of deploy/kubernetes/ through
# `kubernetes-validate --strict` against the pinned Kubernetes version (unknown fields are
# errors), and the KServe resources of deploy/kserve/ against the kserve SDK's models
# (deploy/validate_kserve.py: kubernetes-validate has no schemas for KServe's CRDs).
# Prints one line per resource; exits non-zero if any is invalid.
#
# The validators live in the test command's virtualenv (scripts/python-env.sh, pinned in
# tests/conformance/requirements.txt), made once; a warm run takes a few seconds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
kubernetes_version=1.33.0
# The test command's virtualenv (tests/conformance/requirements.txt pins
# kubernetes-validate and kserve), made once by scripts/python-env.sh.
python="$(./scripts/python-env.sh | tail -n 1)"
bin="$(dirname "$python")"

status=0
# The resources only: kustomization.yaml is kustomize's, not the API server's.
mapfile -t manifests < <(find deploy/kubernetes -name '*.yaml' ! -name kustomization.yaml | sort)
# One line per resource (sed ends its last line, which it leaves open).
"$bin/kubernetes-validate" --strict --kubernetes-version "$kubernetes_version" "${manifests[@]}" |
    sed -e '$a\' || status=1
"$python" deploy/validate_kserve.py deploy/kserve/*.yaml || status=1
if ((status == 0)); then
    echo "validate-manifests: ${#manifests[@]} Kubernetes $kubernetes_version manifests and $(ls deploy/kserve/*.yaml | wc -l) KServe files valid"
fi
exit "$status"
