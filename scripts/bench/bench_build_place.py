"""Time and memory to build and place a GPT on several ranks (issue 19): the model is built on
the meta device (shapes and initialisers, no storage) and laid out with Module.to_global, every
parameter split along its first axis over the ranks (ZeRO-3's layout), so each rank makes only
its piece (Note [Meta tensors], Note [Sharded creation]). With --eager the same model is built
with storage on every rank first and then placed (what a user without the meta device does),
for contrast. Rank 0 prints the logical size, the local shard, the seconds of each phase, the
peak RSS growth and the CPU allocator's live bytes after placing; every rank's values are
checked against the one-device initialisation with --check (small models).

    .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 4 \\
        scripts/bench/bench_build_place.py --n-layer 26 --n-embd 1792 --n-head 14
"""

import argparse
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "examples", "gpt"), os.path.join(_ROOT, "examples")]

import numpy as np  # noqa: E402

import oneflowlike as flow  # noqa: E402
from common.trainer import peak_rss_mib, rss_mib  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=26)
    p.add_argument("--n-embd", type=int, default=1792)
    p.add_argument("--n-head", type=int, default=14)
    p.add_argument("--eager", action="store_true", help="build with storage on every rank first")
    p.add_argument("--check", action="store_true",
                   help="compare every piece with the one-device initialisation (small models)")
    a = p.parse_args()
    config = GPTConfig(n_layer=a.n_layer, n_embd=a.n_embd, n_head=a.n_head, block_size=256)
    rank, world = flow.env.get_rank(), flow.env.get_world_size()
    placement = flow.placement("cpu", ranks=list(range(world)))
    rss0, live0 = rss_mib(), flow._C.cpu_memory_live_bytes()
    start = time.perf_counter()
    flow.manual_seed(0)
    if a.eager:
        model = GPT(config)
    else:
        with flow.device("meta"):
            model = GPT(config)
    built = time.perf_counter()
    params = model.num_parameters()
    model.to_global(placement, flow.sbp.split(0))
    placed = time.perf_counter()
    local = sum(int(np.prod(q.to_local().shape)) for q in model.parameters())
    live = flow._C.cpu_memory_live_bytes() - live0
    if a.check:  # every rank's pieces against the one-device initialisation (small models)
        flow.manual_seed(0)
        reference = dict(GPT(config).named_parameters())
        for name, q in model.named_parameters():
            whole = reference[name].numpy()
            rows = whole.shape[0] // world
            assert np.array_equal(q.to_local().numpy(), whole[rank * rows:(rank + 1) * rows]), name
    print(f"{'eager' if a.eager else 'meta'} build, {params / 1e9:.3f} B parameters "
          f"({params * 4 / 2**30:.2f} GiB float32) on {world} ranks: local shard {local / 1e6:.1f} M "
          f"({local * 4 / 2**30:.3f} GiB); build {built - start:.2f} s, place {placed - built:.2f} s; "
          f"peak RSS growth {peak_rss_mib() - rss0:.0f} MiB, allocator live {live / 2**20:.0f} MiB",
          flush=True)


if __name__ == "__main__":
    main()
