#!/usr/bin/env bash
# Runs every test: setup (installs and builds, incrementally), then CTest (GoogleTest) and
# pytest. Fails if either fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
status=0
echo "[test] C++ (ctest)"
(cd build && ctest --output-on-failure -j "$(nproc)") || status=1
echo "[test] Python (pytest)"
.venv/bin/python -m pytest -q tests/python || status=1
exit $status
