#!/usr/bin/env bash
# Build llama.cpp's llama-server for greval's offline judge (once; later runs reuse it).
# Needs: cmake, ninja-build, g++ (Debian) and network access to PyPI for the llama-cpp-python sdist.
# The binary lands in $GREVAL_HOME/llama.cpp/<version>/bin/llama-server (default ~/.local/share/greval).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m greval local-judge build "$@"
