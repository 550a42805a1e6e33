#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the offline demo audit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/blackbox-audit demo "$@"
