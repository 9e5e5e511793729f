#!/usr/bin/env bash
# Creates .venv-hf, the optional environment of the PyTorch comparisons (bench/hf_compare.py, st_encode.py),
# from bench/requirements-hf.txt. Separate from .venv on purpose: torch and transformers are never
# dependencies of realm_tf, only of this one benchmark.
#
#   bench/setup_hf_env.sh                 # creates .venv-hf in the repository root (once)
#   PYTHON=python3.11 bench/setup_hf_env.sh
#   TORCH_INDEX_URL= bench/setup_hf_env.sh   # no PyTorch index (a local wheel via pip's find-links)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${root}/.venv-hf"
# The CPU-only torch wheels live on PyTorch's own index; PyPI's Linux build pulls gigabytes of CUDA.
index_url="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"

if [[ -x "${venv}/bin/python" ]] && "${venv}/bin/python" -c "import torch, transformers, sentence_transformers" 2>/dev/null; then
  echo "${venv} is ready"
  exit 0
fi
"${PYTHON:-python3}" -m venv "${venv}"
extra=()
if [[ -n "${index_url}" ]]; then
  extra=(--extra-index-url "${index_url}")
fi
"${venv}/bin/pip" install --quiet ${extra[@]+"${extra[@]}"} -r "${root}/bench/requirements-hf.txt"
"${venv}/bin/python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
echo "created ${venv}"
