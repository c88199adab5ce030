#!/usr/bin/env bash
# The README's test command: the whole suite, in the Python greval was set up in (scripts/_python.sh).
# Makes sure everything the tests use is installed first (scripts/setup.sh --all; quick once done).
# Arguments go to pytest (e.g. -m "not slow", -k agreement).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --all
. scripts/_python.sh
# Four xdist workers (most tests wait on a server, a subprocess or HTTP, so four pay on two cores): a module runs
# whole on one worker unless tests/conftest.py's SPREAD lists it, the slowest tests first. GREVAL_TEST_WORKERS=0,
# or -n / -p no:xdist among the arguments, decides otherwise.
PARALLEL=(-n "${GREVAL_TEST_WORKERS:-4}" --dist loadgroup)
for arg in "$@"; do
  case "$arg" in
    -n | -n[0-9]* | -nauto | -nlogical | --numprocesses* | no:xdist) PARALLEL=() ;;
  esac
done
if [ "${GREVAL_TEST_WORKERS:-4}" = 0 ]; then PARALLEL=(); fi
set +e
# The 15 slowest tests at the end: where the suite's time goes (issue 30 keeps it under 8 minutes).
"$PY" -m pytest ${PARALLEL[@]+"${PARALLEL[@]}"} --durations=15 "$@"
code=$?
# With a selection (-k, -m …) pytest's 5, "no test collected", is not a failure; the whole suite must run.
if [ "$#" -gt 0 ] && [ "$code" = 5 ]; then code=0; fi
exit "$code"
