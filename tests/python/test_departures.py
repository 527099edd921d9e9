"""A rank whose program ends while others still need it (issue 14, item 4): every survivor
ends within the fault timeout, naming the rank that left and where it stopped, instead of
waiting for the watchdog (Note [Departures] in actor/session_transport.h)."""

import re
import time

from launching import run_worker


def _survivors_end_at_once_naming_rank_1(*args):
    """Runs early_exit_worker.py on 3 processes; returns what each survivor caught."""
    start = time.monotonic()
    result = run_worker(3, "early_exit_worker.py", *args, check=False, timeout=120,
                        OFL_FAULT_TIMEOUT="10")
    elapsed = time.monotonic() - start
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "rank 1: done after 3 steps" in out, out
    messages = []
    for survivor in (0, 2):
        caught = re.search(rf"rank {survivor} caught after ([0-9.]+) s in step 4: (.*)", out)
        assert caught, out
        assert float(caught.group(1)) < 10, caught.group(0)
        messages.append((survivor, caught.group(2)))
    assert elapsed < 60, elapsed  # not the 60 s watchdog, nor its stall report alone
    assert "no actor made progress" not in out, out
    return messages


def test_survivors_of_a_rank_that_ended_its_loop_early_end_at_once_naming_it():
    for survivor, message in _survivors_end_at_once_naming_rank_1():
        assert ("rank 1 ended its program after 3 iterations of 'Train', while rank "
                f"{survivor} needs it in iteration 4") in message, message


# Eagerly on global tensors: the survivors wait in a one-op graph's run on their own thread
# (Note [Caller-run runtimes]), which ends as soon as the departure arrives.
def test_an_eager_rank_that_ended_early_ends_the_others_naming_it():
    for _, message in _survivors_end_at_once_naming_rank_1("--eager"):
        assert "rank 1 ended its program" in message, message
