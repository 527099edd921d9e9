#!/usr/bin/env bash
# Communication benchmarks (docs/benchmarks.md, "Communication (issue 5)"): ucx_perftest and
# bench_comm side by side in one invocation, on this host (UCX picks shared memory).
# Usage: bash scripts/bench/bench_comm.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH=build/scripts/bench/bench_comm
LAUNCH=(.venv/bin/python -m oneflowlike.distributed.launch)
free_port() {
  .venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

perftest() {  # perftest TEST SIZE ITERATIONS -> the "Final:" line
  local port
  port=$(free_port)
  ucx_perftest -t "$1" -s "$2" -n "$3" -p "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  ucx_perftest 127.0.0.1 -t "$1" -s "$2" -n "$3" -p "$port" 2>&1 | grep Final
  wait "$server" || true
}

# Each size: ucx_perftest, then ours, so both see the machine in the same moment.
echo "## tag bandwidth: bytes, ucx_perftest tag_bw (MB/s), ours (GB/s)"
for bytes in 4096 16384 65536 262144 1048576 4194304 16777216 67108864; do
  n=$((2147483648 / bytes)); ((n > 200000)) && n=200000; ((n < 20)) && n=20
  theirs=$(perftest tag_bw "$bytes" "$n" | awk '{print $6}')
  ours=$("${LAUNCH[@]}" --nproc_per_node 2 --master_port "$(free_port)" --no_python "$BENCH" \
    transfer "$bytes" 2>/dev/null | grep '^\[rank 0\] | [0-9]' | awk '{print $6}')
  echo "$bytes $theirs $ours"
done
echo "## ucx_perftest tag_lat 8 bytes (us: 50th percentile, average, overall)"
perftest tag_lat 8 20000 | awk '{print $3, $4, $5}'

echo "## bench_comm"
"${LAUNCH[@]}" --nproc_per_node 2 --master_port "$(free_port)" --no_python "$BENCH" roundtrip 2>/dev/null | grep '^\[rank 0\]'
"${LAUNCH[@]}" --nproc_per_node 2 --master_port "$(free_port)" --no_python "$BENCH" latency 2>/dev/null | grep '^\[rank 0\]'
for n in 2 4; do
  "${LAUNCH[@]}" --nproc_per_node "$n" --master_port "$(free_port)" --no_python "$BENCH" allreduce 64 \
    2>/dev/null | grep '^\[rank 0\]'
done
