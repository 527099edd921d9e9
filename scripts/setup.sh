#!/usr/bin/env bash
# Installs what oneflowlike needs on Debian 12, makes .venv and builds (incrementally).
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config
  libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgtest-dev libgmock-dev
  libucx-dev ucx-utils libdnnl-dev libgoogle-perftools-dev pybind11-dev python3-dev python3-venv
  python3-numpy python3-pytest iproute2)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Debian's python (numpy and pytest come from apt); the pyenv python on PATH lacks numpy.
if [[ ! -x .venv/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
# PyTorch, so that the comparisons against it run instead of skipping (PyPI's wheel; about a
# minute on a fresh machine, nothing when it is there).
TORCH_VERSION=2.15.0
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch==$TORCH_VERSION into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$ROOT/python" > "$SITE/oneflowlike.pth"

BUILD_TYPE=${OFL_BUILD_TYPE:-Release}
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
cmake --build build -j "$(nproc)"
.venv/bin/python -c "import oneflowlike" || { echo "[setup] import oneflowlike failed"; exit 1; }
echo "[setup] ok: .venv/bin/python -c 'import oneflowlike' works"
