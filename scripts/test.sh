#!/usr/bin/env bash
# The README's test command: the whole suite, in the Python greval was set up in (scripts/_python.sh).
# Makes sure everything the tests use is installed first (scripts/setup.sh --all; quick once done).
# Arguments go to pytest (e.g. -m "not slow", -k agreement).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --all
. scripts/_python.sh
set +e
"$PY" -m pytest "$@"
code=$?
# With a selection (-k, -m …) pytest's 5, "no test collected", is not a failure; the whole suite must run.
if [ "$#" -gt 0 ] && [ "$code" = 5 ]; then code=0; fi
exit "$code"
