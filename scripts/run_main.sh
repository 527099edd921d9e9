#!/usr/bin/env bash
# The main job: setup (installs and builds), then a byte-level GPT (examples/gpt/train.py,
# written with flow.nn and nn.Graph) trained on the King James text on 4 CPU ranks, data x
# pipeline parallel (dp 2 x pp 2, 4 micro-batches), one process per rank started by the
# launcher. Extra arguments go to the training script (e.g. --steps 50, --tp 2 --pp 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 4 \
  examples/gpt/train.py --dp 2 --pp 2 --micro-batches 4 --n-embd 128 --steps 500 "$@"
