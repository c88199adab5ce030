#!/usr/bin/env bash
# The README's first command: set greval up (scripts/setup.sh), then run its whole loop offline on the
# bundled example (`greval quickstart`). Arguments go to `greval quickstart` (e.g. --judge openai:gpt-4o-mini).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/_python.sh
exec "$PY" -m greval quickstart "$@"
