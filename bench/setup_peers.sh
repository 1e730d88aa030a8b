#!/usr/bin/env bash
# Build the peer virtual environments the benchmarks compare against (git-ignored, under bench/).
#   bench/.venv-sae       sae-lens, eai-sparsify (import name sparsify), dictionary-learning
#   bench/.venv-circuits  auto-circuit, transformer-lens (the same 3.9.0 as the workbench)
# torch is pinned to the CPU build the workbench uses; an unpinned torch pulls a multi-GB CUDA build.
# Usage: bash bench/setup_peers.sh [python3.11]
set -euo pipefail
cd "$(dirname "$0")"
PY=${1:-python3.11}
TORCH="torch==2.13.0"

if [ ! -x .venv-sae/bin/python ]; then "$PY" -m venv .venv-sae; fi
.venv-sae/bin/pip install -q "$TORCH" "sae-lens==6.54.12" "eai-sparsify==1.3.3" "dictionary-learning==0.1.0"
# nnsight (a dictionary-learning dependency) pulls a torchvision built for another torch; nothing
# benchmarked imports it, and a mismatched one breaks `import transformers` (hence sparsify).
.venv-sae/bin/pip uninstall -y -q torchvision || true

if [ ! -x .venv-circuits/bin/python ]; then "$PY" -m venv .venv-circuits; fi
# auto-circuit 1.0.1 imports `attr` without declaring attrs; it otherwise takes the newest
# transformer-lens (4.x), whose model code differs from the workbench's 3.9.0.
.venv-circuits/bin/pip install -q "$TORCH" "auto-circuit==1.0.1" "transformer-lens==3.9.0" attrs

.venv-sae/bin/python -c "import sae_lens, sparsify, dictionary_learning.trainers.top_k; print('venv-sae ok')"
.venv-circuits/bin/python -c "import transformer_lens, attr, auto_circuit; print('venv-circuits ok')"
