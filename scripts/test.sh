#!/usr/bin/env bash
# Runs every test: setup (installs and builds, incrementally), then CTest (GoogleTest) and
# pytest. Fails if either fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
status=0
echo "[test] C++ (ctest)"
(cd build && ctest --output-on-failure -j "$(nproc)") || status=1
# Tests that need a GPU skip where there is none; say why once.
.venv/bin/python -c "import oneflowlike as f; n = f.cuda.device_count(); \
print(f'[test] CUDA devices: {n}' + ('' if n else f' (GPU tests skipped: no CUDA device: {f.cuda.why_unavailable()})'))"
echo "[test] Python (pytest)"
.venv/bin/python -m pytest -q tests/python || status=1
exit $status
