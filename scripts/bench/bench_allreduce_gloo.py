"""gloo's all-reduce or broadcast (torch.distributed), the reference of the collective
benchmark (docs/benchmarks.md, "Collectives (issue 16)"): the sizes and repeats of `bench_comm
allreduce` (or `broadcast`, from rank 0, timed until the last member has it as ours is), best time
per size, printed by rank 0 as "| bytes | gloo ms | gloo bus GB/s |".

Usage: .venv/bin/python scripts/bench/bench_allreduce_gloo.py NPROC [MAX_MIB] [allreduce|broadcast]
"""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, nproc, port, max_mib, op):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nproc)
    nbytes = 4096
    while nbytes <= max_mib << 20:
        x = torch.ones(nbytes // 4)
        repeats = 50 if nbytes <= 1 << 20 else 10 if nbytes <= 16 << 20 else 5
        best = float("inf")
        for i in range(repeats + 1):
            x.fill_(1.0 if op == "allreduce" or rank == 0 else 0.0)
            dist.barrier()
            start = time.perf_counter()
            if op == "allreduce":
                dist.all_reduce(x)
                ms = (time.perf_counter() - start) * 1e3
            else:  # until the last member has it, as bench_comm's
                dist.broadcast(x, src=0)
                slowest = torch.tensor([(time.perf_counter() - start) * 1e3], dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                ms = slowest.item()
            if i > 0:
                best = min(best, ms)
        assert x[-1].item() == (nproc if op == "allreduce" else 1.0), x[-1].item()
        if rank == 0:
            received = 2 * (nproc - 1) / nproc * nbytes if op == "allreduce" else nbytes
            print(f"| {nbytes} | {best:.3f} | {received / best / 1e6:.2f} |", flush=True)
        nbytes *= 4
    dist.destroy_process_group()


def main():
    nproc = int(sys.argv[1])
    max_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    op = sys.argv[3] if len(sys.argv) > 3 else "allreduce"
    assert op in ("allreduce", "broadcast"), op
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(run, args=(nproc, port, max_mib, op), nprocs=nproc)


if __name__ == "__main__":
    main()
