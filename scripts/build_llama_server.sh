#!/usr/bin/env bash
# Build llama.cpp's llama-server from source for greval's offline judge (once; later runs reuse it): the fallback
# for platforms where pip has no xllamacpp wheel (scripts/setup.sh installs the wheel where it can, and runs this
# build itself where it cannot). With both, the wheel serves unless GREVAL_LLAMA_ENGINE=build.
# Needs: cmake, ninja-build, g++ (Debian) and network access to PyPI for the llama-cpp-python sdist.
# The binary lands in $GREVAL_HOME/llama.cpp/<version>/bin/llama-server (default ~/.local/share/greval).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m greval local-judge build "$@"
