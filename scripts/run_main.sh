#!/usr/bin/env bash
# The main job: setup (installs and builds), then byte-level GPT training on the King James text
# on 4 CPU ranks, data x pipeline parallel (dp 2 x pp 2, 4 micro-batches), one process per rank
# started by the launcher. Extra arguments go to the training program (e.g. --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 4 --no_python \
  build/examples/train_gpt --dp 2 --pp 2 --micro-batches 4 --steps 200 "$@"
