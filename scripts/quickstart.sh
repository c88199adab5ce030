#!/usr/bin/env bash
# The README's first command: install greval (scripts/setup.sh), then run its whole loop offline on the
# bundled example (`greval quickstart`). Extra arguments go to `greval quickstart` (e.g. --judge openai:gpt-4o-mini).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec python -m greval quickstart "$@"
