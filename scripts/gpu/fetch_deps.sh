#!/usr/bin/env bash
# Here (where apt reaches the Debian mirror): downloads the Debian packages the GPU machine lacks
# into .gpu/ (ignored; about 15 MiB), for scripts/gpu/check.sh to unpack there. The device tool
# carries it: run(command="bash scripts/gpu/check.sh", carry=[".gpu"]). ../shared/GPU.md says why.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu
cd .gpu
packages=(libprotobuf-dev libprotobuf32 protobuf-compiler libprotoc32 libgoogle-glog-dev
          libgoogle-glog0v6 libgflags-dev libgflags2.2 libucx-dev libucx0 libdnnl-dev libdnnl2
          libgtest-dev libunwind8 libunwind-dev libnuma1 librdmacm1 libibverbs1 pybind11-dev)
missing=()
for p in "${packages[@]}"; do
  compgen -G "${p}_*.deb" > /dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get download "${missing[@]}"
fi
du -sh .
