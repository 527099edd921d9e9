#!/usr/bin/env bash
# All-reduce across two "hosts" (docs/benchmarks.md, "Collectives"): two network namespaces
# joined by a veth pair, NPROC ranks on each, UCX over TCP only between them (UCX_TLS=tcp,self),
# so every message pays a network hop's latency, as between machines. bench_comm allreduce
# times the ring and recursive doubling side by side at each size up to 1 MiB.
# Usage (root, after scripts/setup.sh): bash scripts/bench/bench_allreduce_hosts.sh [NPROC] [MIB]
set -euo pipefail
cd "$(dirname "$0")/../.."
NPROC=${1:-2}
MIB=${2:-1}
suffix=$(printf '%04x' $((RANDOM)))
ns=(ofl-bench-$suffix-0 ofl-bench-$suffix-1)
dev=(oflb${suffix}0 oflb${suffix}1)
addr=(10.214.0.1 10.214.0.2)
cleanup() {
  ip link del "${dev[0]}" 2> /dev/null || true
  for n in "${ns[@]}"; do ip netns del "$n" 2> /dev/null || true; done
}
trap cleanup EXIT
for n in "${ns[@]}"; do ip netns add "$n"; done
ip link add "${dev[0]}" type veth peer name "${dev[1]}"
for i in 0 1; do
  ip link set "${dev[$i]}" netns "${ns[$i]}"
  ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "${dev[$i]}"
  ip -n "${ns[$i]}" link set "${dev[$i]}" up
  ip -n "${ns[$i]}" link set lo up
done
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
for i in 1 0; do
  ip netns exec "${ns[$i]}" env UCX_TLS=tcp,self UCX_NET_DEVICES="${dev[$i]}" \
    .venv/bin/python -m oneflowlike.distributed.launch --nnodes 2 --node_rank "$i" \
    --nproc_per_node "$NPROC" --master_addr "${addr[0]}" --secret "$secret" --no_python \
    build/scripts/bench/bench_comm allreduce "$MIB" > "/tmp/ofl_bench_hosts_$i.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
grep -h "rank 0\] |" /tmp/ofl_bench_hosts_0.log || cat /tmp/ofl_bench_hosts_*.log
exit $status
