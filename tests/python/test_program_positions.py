"""Ranks running their ops on global tensors in different orders end at once, every rank naming
both ranks and both ops (Note [Program positions] in actor/program_positions.h), instead of
waiting for the watchdog or pairing one op's data with another's; ops that exchange no data may
differ between ranks (dist/positions_worker.py)."""

import pytest
from launching import launch


@pytest.mark.parametrize("case", ["different ops", "extra op"])
def test_ranks_running_different_ops_are_refused_at_once(case):
    out = launch(2, "positions_worker.py", case, timeout=120)
    for rank in (0, 1):
        assert f"rank {rank}: refused 2" in out, out


def test_a_rank_may_run_ops_that_exchange_no_data_alone():
    out = launch(2, "positions_worker.py", "local log", timeout=120)
    for rank in (0, 1):
        assert f"rank {rank}: ok" in out, out
