"""flow.distributed.all_reduce against gloo's (torch.distributed, the same sizes, in the same
invocation; docs/benchmarks.md "flow.distributed all-reduces"): the sum (the caller's tensor
donated, Note [Local collectives] in comm.py), and max both ways of Note [Reductions and
groups]: by columns (an all-to-all, each rank's columns reduced, an all-gather) and the whole
rows gathered and reduced on every rank. Best of the repeats per size, float32.

Usage: .venv/bin/python scripts/bench/bench_reduce_ops.py [--nproc 2 4] [--max-mib 64]
"""

import argparse
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAYS = ("sum", "columns", "rows")  # ours; gloo's: "gloo sum", "gloo max"


def sizes(max_mib):
    nbytes = 4096
    while nbytes <= max_mib << 20:
        yield nbytes
        nbytes *= 4


def repeats(nbytes):
    return 30 if nbytes <= 1 << 20 else 8 if nbytes <= 16 << 20 else 4


def ours(max_mib):
    """Under the launcher: rank 0 prints "bytes way ms" lines."""
    import oneflowlike as flow
    import oneflowlike.distributed as dist
    from oneflowlike import comm

    rank = dist.get_rank()
    for nbytes in sizes(max_mib):
        x = flow.ones(nbytes // 4)
        for way in WAYS:
            comm._by_columns = lambda piece, ranks, columns=way == "columns": columns
            best = float("inf")
            for i in range(repeats(nbytes) + 1):
                x.fill_(float(rank + 1))
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(x, op="sum" if way == "sum" else "max")
                ms = (time.perf_counter() - start) * 1e3
                if i > 0:
                    best = min(best, ms)
            want = sum(range(1, dist.get_world_size() + 1)) if way == "sum" else dist.get_world_size()
            assert x[-1].item() == want, (way, x[-1].item())
            if rank == 0:
                print(f"{nbytes} {way} {best:.3f}", flush=True)


def gloo(rank, nproc, port, max_mib):
    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                             world_size=nproc)
    for nbytes in sizes(max_mib):
        x = torch.ones(nbytes // 4)
        for op in ("sum", "max"):
            best = float("inf")
            for i in range(repeats(nbytes) + 1):
                x.fill_(float(rank + 1))
                tdist.barrier()
                start = time.perf_counter()
                tdist.all_reduce(x, op=tdist.ReduceOp.SUM if op == "sum" else tdist.ReduceOp.MAX)
                if i > 0:
                    best = min(best, (time.perf_counter() - start) * 1e3)
            assert x[-1].item() == (nproc * (nproc + 1) // 2 if op == "sum" else nproc)
            if rank == 0:
                print(f"{nbytes} gloo_{op} {best:.3f}", flush=True)
    tdist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(nproc, max_mib):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    times = {}
    launch = [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node",
              str(nproc), "--master_port", str(free_port()), __file__, "--ours",
              "--max-mib", str(max_mib)]
    theirs = [sys.executable, __file__, "--gloo", str(nproc), "--max-mib", str(max_mib)]
    for command in (launch, theirs):
        out = subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            fields = line.split("] ")[-1].split()
            if len(fields) == 3 and fields[0].isdigit():
                times[int(fields[0]), fields[1]] = float(fields[2])
    print(f"\n{nproc} processes\n")
    print("| bytes | sum: ours ms | gloo ms | ours / gloo speed | max: ours by columns ms "
          "| ours rows gathered ms | gloo ms | ours (as chosen) / gloo speed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    from oneflowlike import comm

    for nbytes in sizes(max_mib):
        s, c, r, gs, gm = (times[nbytes, w] for w in WAYS + ("gloo_sum", "gloo_max"))
        chosen = c if nbytes >= comm.kColumnsBytes else r
        print(f"| {nbytes} | {s:.3f} | {gs:.3f} | {gs / s:.2f} | {c:.3f} | {r:.3f} | {gm:.3f} "
              f"| {gm / chosen:.2f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--ours", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gloo", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ours:
        ours(args.max_mib)
    elif args.gloo:
        import torch.multiprocessing as mp

        mp.spawn(gloo, args=(args.gloo, free_port(), args.max_mib), nprocs=args.gloo)
    else:
        print(f"command: {' '.join(sys.argv)}; {time.strftime('%Y-%m-%d')}")
        for nproc in args.nproc:
            measure(nproc, args.max_mib)


if __name__ == "__main__":
    main()
