#!/usr/bin/env bash
# Build the peer virtual environments the benchmarks compare against (git-ignored, under bench/).
#   bench/.venv-sae       sae-lens, eai-sparsify (import name sparsify), dictionary-learning
#   bench/.venv-circuits  auto-circuit, transformer-lens (the same 3.9.0 as the workbench)
#   bench/.venv-dash      sae-dashboard (SAEDashboard), which needs transformer-lens 2.x and numpy 1.x
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

if [ ! -x .venv-dash/bin/python ]; then "$PY" -m venv .venv-dash; fi
# sae-dashboard 0.8.0 pins transformer-lens < 3 (hence its own venv), which pins numpy < 2; pip then takes a
# pyarrow built for numpy 2 (21.0.0 works with numpy 1) and a torchvision/torchaudio built for another
# torch, which break `import transformers`; nothing benchmarked imports them.
.venv-dash/bin/pip install -q "$TORCH" "sae-dashboard==0.8.0" "sae-lens==6.54.12" "transformer-lens==2.17.0" "pyarrow==21.0.0"
.venv-dash/bin/pip uninstall -y -q torchvision torchaudio || true

.venv-sae/bin/python -c "import sae_lens, sparsify, dictionary_learning.trainers.top_k; print('venv-sae ok')"
.venv-circuits/bin/python -c "import transformer_lens, attr, auto_circuit; print('venv-circuits ok')"
.venv-dash/bin/python -c "import sae_dashboard.sae_vis_runner, sae_lens, transformer_lens; print('venv-dash ok')"
