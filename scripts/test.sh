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
# The GPUs' event-gated act protocol on the CPU (Note [Event-gated acts] in actor/act_stream.h):
# the multi-process jobs again, every rank's work on a worker stream.
echo "[test] Python multi-process jobs with asynchronous CPU streams"
OFL_ASYNC_CPU_STREAMS=1 .venv/bin/python -m pytest -q tests/python/test_multiprocess.py || status=1
exit $status
