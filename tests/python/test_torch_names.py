"""Names PyTorch and OneFlow users reach for (issue 14) that are not ops: tensor methods with
nothing to compute, grad modes, and the distributed aliases."""

import numpy as np
import pytest

import oneflowlike as flow


def test_cpu_contiguous_and_unbind():
    t = flow.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.cpu() is t and t.contiguous() is t
    rows = t.unbind()
    columns = flow.unbind(t, dim=1)
    assert len(rows) == 2 and len(columns) == 3
    np.testing.assert_array_equal(rows[1].numpy(), [3, 4, 5])
    np.testing.assert_array_equal(columns[2].numpy(), [2, 5])
    with pytest.raises(IndexError, match=r"\[unbind\] dimension out of range"):
        t.unbind(2)


def test_inference_mode_as_context_and_decorator():
    x = flow.ones(2, requires_grad=True)
    with flow.inference_mode():
        assert not (x * 2).requires_grad
    with flow.inference_mode(False):
        assert (x * 2).requires_grad

    @flow.inference_mode()
    def forward(t):
        return t * 2

    assert not forward(x).requires_grad and flow.is_grad_enabled()
    with pytest.raises(TypeError, match=r"\[inference_mode\] use it as inference_mode\(\)"):
        flow.inference_mode(forward)


def test_distributed_aliases_and_all_device_placement(monkeypatch):
    assert flow.distributed.get_rank() == flow.env.get_rank() == 0
    assert flow.distributed.get_world_size() == 1
    assert flow.env.all_device_placement("cpu") == flow.placement("cpu", ranks=[0])
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "3"), ("LOCAL_RANK", "1"),
                        ("LOCAL_WORLD_SIZE", "3"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29500"), ("OFL_JOB_SECRET", "s")):
        monkeypatch.setenv(name, value)
    assert flow.distributed.get_rank() == 1 and flow.distributed.get_world_size() == 3
    assert flow.env.all_device_placement().flat_ranks == [0, 1, 2]
