#!/usr/bin/env bash
# Communication benchmarks (docs/benchmarks.md, "Communication (issue 5)"): ucx_perftest and
# bench_comm side by side in one invocation, on this host (UCX picks shared memory).
# Usage: bash scripts/bench/bench_comm.sh [REPEATS]   (after scripts/setup.sh; default 7)
#
# On this shared 2-vCPU machine both ucx_perftest and ours jump between states from one second
# to the next (4 KiB tag bandwidth 2, 7-8.5 or 15-17 GB/s; 8-byte latency 0.08, 0.16 or 0.6 us),
# so one pair of runs can compare two different machines. Each figure is therefore measured
# REPEATS times, alternating ucx_perftest and ours, and reported as the median of each with the
# ratio of the medians and the range of the per-pair ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEATS=${1:-7}
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

ours() {  # ours RANKS ARGS... -> rank 0's lines
  "${LAUNCH[@]}" --nproc_per_node "$1" --master_port "$(free_port)" --no_python "$BENCH" \
    "${@:2}" 2>/dev/null | grep '^\[rank 0\]' | sed 's/^\[rank 0\] //'
}

# summarize LABEL THEIRS OURS: "| label | median theirs | median ours | ours / theirs of the
# medians (range of the per-pair ratios) |"; THEIRS and OURS are space-separated, in pair order.
# For bandwidth the goal is a ratio of at least 0.7, for latency at most 2.
summarize() {
  .venv/bin/python - "$@" <<'EOF'
import statistics, sys
label, theirs, ours = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split()))
pairs = sorted(o / t for t, o in zip(theirs, ours))
mt, mo = statistics.median(theirs), statistics.median(ours)
print(f"| {label} | {mt:.3g} | {mo:.3g} | {mo / mt:.2f} ({pairs[0]:.2f}-{pairs[-1]:.2f}) |")
print(f"  pairs (theirs, ours): {' '.join(f'{t:.3g},{o:.3g}' for t, o in zip(theirs, ours))}",
      file=sys.stderr)
EOF
}

echo "## tag bandwidth, GB/s: size | ucx_perftest tag_bw | ours | ours / ucx_perftest (per-pair range); medians of $REPEATS"
for bytes in 4096 16384 65536 262144 1048576 4194304 16777216 67108864; do
  n=$((2147483648 / bytes)); ((n > 200000)) && n=200000; ((n < 20)) && n=20
  theirs="" mine=""
  for ((r = 0; r < REPEATS; ++r)); do
    # ucx_perftest prints MB/s with MB = 2^20 bytes; ours prints GB/s (10^9).
    theirs+="$(perftest tag_bw "$bytes" "$n" | awk '{printf "%.4f", $6 * 1048576 / 1e9}') "
    mine+="$(ours 2 transfer "$bytes" | awk '/^\| [0-9]/ {print $4}') "
  done
  summarize "$bytes" "$theirs" "$mine"
done

echo "## one-way latency, us: ucx_perftest tag_lat 8 bytes (overall) | ours: half a 64-byte actor-message round trip; medians of $REPEATS"
theirs="" mine=""
for ((r = 0; r < REPEATS; ++r)); do
  theirs+="$(perftest tag_lat 8 20000 | awk '{print $5}') "
  mine+="$(ours 2 roundtrip | awk '/one way/ {print $(NF - 3)}') "
done
summarize "latency" "$theirs" "$mine"

echo "## bench_comm (one run each)"
ours 2 latency
# Collectives (issue 16): ours (the collective engine over UCX) and gloo, same sizes, same
# invocation; bus bandwidth = the 2(n-1)/n of the bytes each rank receives, per ms.
for n in 2 4; do
  echo "### all-reduce on $n processes: ours"
  ours "$n" allreduce "${ALLREDUCE_MIB:-256}"
  echo "### all-reduce on $n processes: gloo"
  .venv/bin/python scripts/bench/bench_allreduce_gloo.py "$n" "${ALLREDUCE_MIB:-256}"
done
