"""flow.distributed.all_reduce against gloo's (torch.distributed, the same sizes, in the same
invocation; docs/benchmarks.md "flow.distributed all-reduces"): the sum (the caller's tensor
donated, Note [Local collectives] in comm.py), and max both ways of Note [Reductions and
groups]: by columns (an all-to-all, each rank's columns reduced, an all-gather) and the whole
rows gathered and reduced on every rank. Best of the repeats per size, float32.

--overlap: async_op=True against the same call made synchronously (Note [Asynchronous
collectives] in framework/async_runs.py), ours and gloo's: a 16 MiB sum, then local work (20
products of 384 x 384 matrices), rank 1 arriving 10 ms late (a straggler); medians of 7 steps.

Usage: .venv/bin/python scripts/bench/bench_reduce_ops.py [--nproc 2 4] [--max-mib 64] [--overlap]
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


LATE_S = 0.01


def overlap_steps(rank, all_reduce, barrier, x, compute, wait):
    """Median ms of: all_reduce(x) then compute(), synchronous and asynchronous, rank 1 late."""
    times = {"sync": [], "async": []}
    for step in range(9):
        for way in times:
            barrier()
            start = time.perf_counter()
            if rank == 1:
                time.sleep(LATE_S)
            if way == "sync":
                all_reduce(x, False)
                compute()
            else:
                work = all_reduce(x, True)
                compute()
                wait(work)
            if step >= 2:
                times[way].append((time.perf_counter() - start) * 1e3)
    return {way: sorted(t)[len(t) // 2] for way, t in times.items()}


def ours_overlap():
    import oneflowlike as flow
    import oneflowlike.distributed as dist

    a = flow.randn(384, 384)

    def compute():
        y = a
        for _ in range(20):
            y = (y @ a) * 0.01

    result = overlap_steps(dist.get_rank(), lambda x, asynchronous: dist.all_reduce(
        x, async_op=asynchronous), dist.barrier, flow.ones(4 << 20), compute, lambda w: w.wait())
    if dist.get_rank() == 0:
        print(f"overlap ours {result['sync']:.2f} {result['async']:.2f}", flush=True)


def gloo_overlap(rank, nproc, port):
    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                             world_size=nproc)
    a = torch.randn(384, 384)

    def compute():
        y = a
        for _ in range(20):
            y = (y @ a) * 0.01

    result = overlap_steps(rank, lambda x, asynchronous: tdist.all_reduce(
        x, async_op=asynchronous), tdist.barrier, torch.ones(4 << 20), compute, lambda w: w.wait())
    if rank == 0:
        print(f"overlap gloo {result['sync']:.2f} {result['async']:.2f}", flush=True)
    tdist.destroy_process_group()


def measure_overlap(nproc):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launch = [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node",
              str(nproc), "--master_port", str(free_port()), __file__, "--ours-overlap"]
    theirs = [sys.executable, __file__, "--gloo-overlap", str(nproc)]
    print(f"\n{nproc} processes, a 16 MiB sum then local work, rank 1 {LATE_S * 1e3:.0f} ms late "
          "(median ms a step)\n")
    print("| | synchronous | async_op=True | async / sync time |")
    print("| --- | --- | --- | --- |")
    for command in (launch, theirs):
        out = subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            fields = line.split("] ")[-1].split()
            if len(fields) == 4 and fields[0] == "overlap":
                sync, asynchronous = float(fields[2]), float(fields[3])
                print(f"| {fields[1]} | {sync:.2f} | {asynchronous:.2f} | "
                      f"{asynchronous / sync:.2f} |")


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
    p.add_argument("--overlap", action="store_true", help="async_op against synchronous calls")
    p.add_argument("--ours", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gloo", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ours-overlap", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gloo-overlap", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ours:
        ours(args.max_mib)
    elif args.ours_overlap:
        ours_overlap()
    elif args.gloo or args.gloo_overlap:
        import torch.multiprocessing as mp

        if args.gloo:
            mp.spawn(gloo, args=(args.gloo, free_port(), args.max_mib), nprocs=args.gloo)
        else:
            mp.spawn(gloo_overlap, args=(args.gloo_overlap, free_port()),
                     nprocs=args.gloo_overlap)
    else:
        print(f"command: {' '.join(sys.argv)}; {time.strftime('%Y-%m-%d')}")
        for nproc in args.nproc:
            if args.overlap:
                measure_overlap(nproc)
            else:
                measure(nproc, args.max_mib)


if __name__ == "__main__":
    main()
