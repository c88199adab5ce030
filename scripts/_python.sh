# Sourced by the setup, quick-start and test scripts: sets PY to the Python greval lives in.
#  - inside an activated virtual environment: that one;
#  - else ./.venv, created on first use with python3 (or python) -m venv. A plain or system
#    interpreter (Debian's is "externally managed") is never installed into.
if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  PY="$VIRTUAL_ENV/bin/python"
else
  if [ ! -x .venv/bin/python ]; then
    BASE="$(command -v python3 || command -v python || true)"
    if [ -z "$BASE" ]; then
      echo "error: no python3 on PATH (Debian: apt-get install python3 python3-venv)" >&2
      exit 2
    fi
    if ! "$BASE" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "error: greval needs Python >= 3.11; $BASE is $("$BASE" -V 2>&1)" >&2
      exit 2
    fi
    echo "creating the virtual environment .venv with $BASE ($("$BASE" -V 2>&1))"
    if ! "$BASE" -m venv .venv; then
      rm -rf .venv
      echo "error: cannot create .venv (Debian: apt-get install python3-venv)" >&2
      exit 2
    fi
  fi
  PY="$PWD/.venv/bin/python"
fi
export PY
# Python keeps what it compiles as .pyc files, so the next process reads them instead of compiling again. Some
# machines set PYTHONDONTWRITEBYTECODE (this project's CI machine does), and setup.sh's pip installs without
# compiling (it leaves that to first use): together, every process these scripts start — the quick start's steps,
# the suite's hundreds of `greval` runs, the Argilla and Phoenix servers — would compile pandas, scikit-learn,
# langchain and greval from source again. The scripts' own processes keep Python's default instead.
unset PYTHONDONTWRITEBYTECODE
