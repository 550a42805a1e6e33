#!/usr/bin/env bash
# Set up (scripts/setup.sh --dev) and run the whole test suite, real-part tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q "$@"
