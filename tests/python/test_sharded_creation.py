"""Sharded creation (Note [Sharded creation] in oneflowlike/ops/random.h) through the launcher
(dist/creation_worker.py), and its refusals in one process."""

import pytest

import oneflowlike as flow
from launching import launch


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_every_sbp_gives_the_one_device_values_from_pieces_only(nproc):
    out = launch(nproc, "creation_worker.py")
    counts = {1: 32, 2: 64, 4: 128 + 128 + 1}  # rank 0 is in every placement
    assert f"rank 0: {counts[nproc]} creation checks passed" in out, out
    assert out.count("creation checks passed") == nproc, out


def test_a_placement_with_a_device_or_without_an_sbp_is_refused():
    p = flow.placement("cpu", ranks=[0])
    with pytest.raises(ValueError, match=r"\[randn\] takes a placement or a device"):
        flow.randn(2, 3, placement=p, sbp=flow.sbp.broadcast, device="cpu")
    with pytest.raises(ValueError, match=r"a placement needs an sbp"):
        flow.zeros(2, placement=p)
    with pytest.raises(IndexError, match=r"cannot be split on axis 1"):
        flow.ones(2, placement=p, sbp=flow.sbp.split(1))
