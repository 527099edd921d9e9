"""Run by test_restarts.py through the launcher with --max_restarts: examples/gpt/train.py whose
rank OFL_TEST_DIE_RANK kills itself (SIGKILL: no cleanup, as a lost machine) just before step
OFL_TEST_DIE_AT_STEP of the first attempt (OFL_RESTART_COUNT 0). Every argument goes to
train.py; the later attempts run it unchanged."""

import os
import signal
import sys

_GPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "gpt")
sys.path[:0] = [os.path.abspath(_GPT), os.path.abspath(os.path.dirname(_GPT))]

from common.data import ByteData, TokenBatches  # noqa: E402  where each step's batch comes

if (os.environ["OFL_RESTART_COUNT"] == "0"
        and os.environ["RANK"] == os.environ["OFL_TEST_DIE_RANK"]):
    die_at = int(os.environ["OFL_TEST_DIE_AT_STEP"])
    batch, next_rows = ByteData.batch, TokenBatches.next
    taken = []  # TokenBatches' steps (the first attempt starts at step 1)

    def die_before(step):
        if step == die_at:
            print(f"rank {os.environ['RANK']} dies before step {die_at}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    # The batches, not the graph's call, are wrapped: the ranks' runs must come from the same
    # place in the program (Note [Program positions]).
    def dying_batch(data, step, batch_size):
        die_before(step)
        return batch(data, step, batch_size)

    def dying_next(data):
        taken.append(None)
        die_before(len(taken))
        return next_rows(data)

    ByteData.batch, TokenBatches.next = dying_batch, dying_next

import train  # noqa: E402

train.main(sys.argv[1:])
