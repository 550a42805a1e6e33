#!/usr/bin/env bash
# The wheels bench/gpu_whitebox.py needs on the device machine, into .whl/ (git-ignored; name it in
# the run's `carry`). That machine has Python 3.12 with torch, transformers, tokenizers, numpy,
# httpx, tqdm, click and rich, and no package index. It lacks this package and the rest of what
# `import blackbox_audit.adapters.hf` loads (openai with its httpx2 and pydantic, diskcache,
# tenacity). The versions are the ones this checkout's .venv runs; PYVER=3.11 fetches them for a
# local check of the install instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -rf .whl && mkdir -p .whl
# the package from the committed tree (HEAD), in a clean folder: no stale build/ files, no local edits
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git archive HEAD | tar -x -C "$src"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl "$src"
pins=()
for name in openai httpx2 httpcore2 truststore anyio pydantic pydantic-core jiter sniffio annotated-types \
  typing-inspection typing-extensions diskcache tenacity h11; do
  pins+=("$name==$("$PY" -m pip show "$name" | sed -n 's/^Version: //p')")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${PYVER:-3.12}" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${pins[@]}"
ls .whl
du -sh .whl
