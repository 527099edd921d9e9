#!/usr/bin/env bash
# On a lent GPU machine (../shared/GPU.md): builds the C++ targets with CUDA against the Debian
# packages in .gpu/ (scripts/gpu/fetch_deps.sh), runs the CUDA tests (gtest, and pytest when the
# Python module builds), compute-sanitizer over the CUDA gtests and the GPT example on the GPU,
# and leaves the logs in $OUT (summary.txt first). One call:
#   run(command="bash scripts/gpu/check.sh", carry=[".gpu"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ofl_gpu_out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

note "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
  sed 's/^/gpu: /' | tee -a "$summary"

# Our dependencies, from Debian packages unpacked into a prefix (nothing else reaches the net).
deps=/opt/ofl_deps
mkdir -p "$deps"
for f in .gpu/*.deb; do dpkg -x "$f" "$deps"; done
export PATH="$deps/usr/bin:/usr/local/cuda/bin:$PATH"
lib="$deps/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"

# cuDNN and NCCL: the toolkit's, else the ones PyTorch's nvidia-* wheels ship.
py=$(command -v python3)
extra=()
wheel_lib() {  # wheel_lib <module> <library glob>: the first matching file
  "$py" - "$1" "$2" <<'PY' 2>/dev/null
import glob, importlib, os, sys
m = importlib.import_module(sys.argv[1])
for root in m.__path__:
    hits = sorted(glob.glob(os.path.join(root, "lib", sys.argv[2])))
    if hits:
        print(hits[0]); break
PY
}
if [[ ! -f /usr/local/cuda/include/cudnn.h ]]; then
  so=$(wheel_lib nvidia.cudnn "libcudnn.so*")
  [[ -n $so ]] && extra+=(-DCUDNN_INCLUDE_DIR="$(dirname "$(dirname "$so")")/include" -DCUDNN_LIBRARY="$so")
  [[ -n $so ]] && export LD_LIBRARY_PATH="$(dirname "$so"):$LD_LIBRARY_PATH"
fi
if [[ ! -f /usr/local/cuda/include/nccl.h ]]; then
  so=$(wheel_lib nvidia.nccl "libnccl.so*")
  [[ -n $so ]] && extra+=(-DNCCL_INCLUDE_DIR="$(dirname "$(dirname "$so")")/include" -DNCCL_LIBRARY="$so")
  [[ -n $so ]] && export LD_LIBRARY_PATH="$(dirname "$so"):$LD_LIBRARY_PATH"
fi
python_module=OFF
if "$py" -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then
  python_module=ON
fi
note "python module: $python_module ($("$py" --version 2>&1))"

cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DOFL_BUILD_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$deps/usr;$lib/cmake" \
  -DProtobuf_PROTOC_EXECUTABLE="$deps/usr/bin/protoc" -DOFL_BUILD_PYTHON=$python_module \
  -DPython3_EXECUTABLE="$py" "${extra[@]}" > "$OUT/configure.log" 2>&1 ||
  { note "configure FAILED (configure.log)"; tail -30 "$OUT/configure.log"; exit 1; }
start=$SECONDS
ninja -C build-gpu -j16 > "$OUT/build.log" 2>&1 ||
  { note "build FAILED (build.log)"; grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
note "build: $((SECONDS - start)) s"

# The CUDA gtests, then every test of the suites that touch the GPU.
cuda_filter='CudaDevice.*:MatmulCuda.*:RandomCuda.*:DevicePlans.*'
for t in oneflowlike_tests actor_tests; do
  build-gpu/tests/cpp/$t --gtest_filter="$cuda_filter" > "$OUT/$t.log" 2>&1
  note "$t ($cuda_filter): rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$t.log" | tr '\n' ' ')"
done
if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --error-exitcode=1 build-gpu/tests/cpp/oneflowlike_tests \
    --gtest_filter='CudaDevice.*:MatmulCuda.*:RandomCuda.*' > "$OUT/sanitizer.log" 2>&1
  note "compute-sanitizer: rc=$? $(grep -c 'ERROR SUMMARY: 0' "$OUT/sanitizer.log") clean runs"
fi
if [[ $python_module == ON ]]; then
  export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
  cp build-gpu/python/_C*.so python/oneflowlike/ 2>/dev/null
  "$py" -m pytest -q tests/python/test_cuda.py tests/python/test_cuda_matmul.py \
    tests/python/test_cuda_reductions.py tests/python/test_cuda_data_movement.py \
    tests/python/test_cuda_random_optim_fused.py > "$OUT/pytest_cuda.log" 2>&1
  note "pytest CUDA: rc=$? $(tail -1 "$OUT/pytest_cuda.log")"
  "$py" examples/gpt/train.py --device cuda --steps 20 --quiet > "$OUT/gpt_cuda.log" 2>&1
  note "gpt --device cuda: rc=$? $(tail -1 "$OUT/gpt_cuda.log")"
  "$py" examples/gpt/train.py --steps 20 --quiet > "$OUT/gpt_cpu.log" 2>&1
  note "gpt cpu: rc=$? $(tail -1 "$OUT/gpt_cpu.log")"
fi
