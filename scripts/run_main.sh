#!/usr/bin/env bash
# The main job: setup (installs and builds), then the training demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/mlp/train.py "$@"
