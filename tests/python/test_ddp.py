"""flow.comm / flow.distributed collectives on local tensors and DistributedDataParallel (Note
[Local collectives] in comm.py, Note [Eager DDP on local tensors] in nn/parallel.py) on two
processes (dist/ddp_worker.py); their refusals in one process below."""

import pytest

import oneflowlike as flow
from gpus import NEEDS_GPU
from launching import launch as _launch


def test_collectives_and_ddp_on_two_processes_match_one():
    out = _launch(2, "ddp_worker.py")
    assert out.count("ddp OK") == 2, out


# The same with every tensor on each process's GPU: simulated in CI (Note [Simulated CUDA
# devices]), on the GPU itself (both processes sharing it) where there is one.
@pytest.mark.parametrize("where", [
    pytest.param({"OFL_SIMULATE_CUDA_DEVICES": "1"}, id="simulated"),
    pytest.param({}, id="gpu", marks=NEEDS_GPU),
])
def test_collectives_and_ddp_of_tensors_on_gpus(where):
    out = _launch(2, "ddp_worker.py", "--device", "cuda", **where)
    assert out.count("ddp OK") == 2, out


def test_reductions_groups_and_objects_on_three_processes_match_one():
    out = _launch(3, "collectives_worker.py")
    assert out.count("collectives OK") == 3, out


def test_a_groups_collectives_need_nothing_from_the_ranks_outside_it():
    out = _launch(3, "group_first_worker.py", timeout=120, OFL_BOOTSTRAP_TIMEOUT="20")
    assert out.count("group first OK") == 3, out


def test_ddp_and_collectives_refuse_what_they_do_not_do():
    with pytest.raises(TypeError, match=r"\[DistributedDataParallel\] wraps a flow.nn.Module"):
        flow.nn.parallel.DistributedDataParallel(lambda x: x)
    with flow.device("meta"):
        meta = flow.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"'weight' is a meta tensor"):
        flow.nn.parallel.DistributedDataParallel(meta)
    with pytest.raises(TypeError, match=r"unexpected argument 'gradient_as_bucket_view'"):
        flow.nn.parallel.DistributedDataParallel(flow.nn.Linear(2, 2),
                                                 gradient_as_bucket_view=True)
    with pytest.raises(TypeError, match=r"\[all_reduce\] needs a local tensor"):
        flow.comm.all_reduce([1.0])
    with pytest.raises(ValueError, match=r"\[broadcast\] src must be a rank of the group \[0\]"):
        flow.comm.broadcast(flow.ones(2), 3)
    with pytest.raises(ValueError, match=r"\[reduce_scatter_tensor\] the input must be the 1 "
                                         r"ranks' parts joined along axis 0, shape \(2, 3\)"):
        flow.distributed.reduce_scatter_tensor(flow.zeros(2, 3), flow.zeros(3, 3))
    t = flow.ones(2)
    work = flow.distributed.all_reduce(t, async_op=True)  # on the runs thread, even alone
    assert work.wait() and work.is_completed()
    future = work.get_future()
    assert future.done() and future.wait()[0] is t and future.value()[0] is t
    assert future.then(lambda f: f.value()[0].numpy().sum()).wait() == 2.0
    with pytest.raises(TypeError, match=r"\[all_reduce\] group must be a group from new_group"):
        flow.distributed.all_reduce(flow.ones(2), group=[0])
    with pytest.raises(ValueError, match=r"\[new_group\] ranks must be distinct ranks of the "
                                         r"job, in \[0, 1\). However, got \[0, 3\]"):
        flow.distributed.new_group([0, 3])
    with pytest.raises(ValueError, match=r"op must be one of sum, avg, product, min, max"):
        flow.distributed.all_reduce(flow.ones(2), op="mean")
    with pytest.raises(ValueError, match=r"world_size=4 differs from the launcher's 1"):
        flow.distributed.init_process_group("gloo", world_size=4)
    # One process: the wrapper trains as the module alone.
    flow.manual_seed(1)
    model = flow.nn.Linear(3, 2)
    ddp = flow.nn.parallel.DistributedDataParallel(model)
    ddp(flow.ones(4, 3)).sum().backward()
    assert model.weight.grad is not None and tuple(model.weight.grad.shape) == (2, 3)
