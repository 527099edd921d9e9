"""The distributed front end through the launcher on 1, 2 and 4 processes: SBP conversions of
global tensors keep the logical value (dist/sbp_worker.py), and nn.Graph training on DP2, TP2,
PP2 with 4 micro-batches and DP2 x TP2 gives the one-device losses and weights, and so does
eager training of the same layouts (dist/graph_worker.py). In-process checks of nn.Graph's errors are below."""

import numpy as np
import pytest

import oneflowlike as flow
from launching import launch as _launch
from gpus import NEEDS_GPU


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_every_sbp_conversion_keeps_the_value(nproc):
    out = _launch(nproc, "sbp_worker.py")
    passed = [line for line in out.splitlines() if "checks passed" in line]
    assert len(passed) == nproc, out
    # Rank 0 is in every placement: it checks all conversions of 1..nproc ranks (and 2x2).
    counts = {1: 39, 2: 81, 4: 407}
    assert f"rank 0: {counts[nproc]} checks passed" in out, out


@pytest.mark.parametrize("model", ["mlp", "gpt"])
@pytest.mark.parametrize("layout,nproc",
                         [("dp2", 2), ("dp2zero", 2), ("tp2", 2), ("pp2", 2), ("dp2tp2", 4)])
def test_graph_training_matches_one_device(model, layout, nproc):
    out = _launch(nproc, "graph_worker.py", "--model", model, "--layout", layout)
    assert out.count(" OK") == nproc, out
    assert "FAILED" not in out


# Note [Eager global autograd]: the same laid-out models trained eagerly (loss.backward() on
# global tensors, flow.optim stepping global parameters) give the one-device graph's losses and
# weights, pipeline stages too (each stage's modules on its placement, the activation moved by
# to_global, its gradient back through it); with clip_grad_norm_ on global gradients, or dropout (Note [Eager global dropout]: the
# one-device masks, also on TP's partial sums), the same eager loop's on one device.
@pytest.mark.parametrize("model,layout,nproc,extra", [
    ("mlp", "dp2", 2, []), ("mlp", "tp2", 2, []), ("mlp", "dp2tp2", 4, ["--clip", "0.5"]),
    ("gpt", "dp2", 2, []), ("gpt", "tp2", 2, []), ("gpt", "dp2tp2", 4, []),
    ("gpt", "dp2tp2", 4, ["--dropout", "0.2"]), ("mlp", "pp2", 2, []), ("gpt", "pp2", 2, []),
], ids=["mlp-dp2", "mlp-tp2", "mlp-dp2tp2-clip", "gpt-dp2", "gpt-tp2", "gpt-dp2tp2",
        "gpt-dp2tp2-dropout", "mlp-pp2", "gpt-pp2"])
def test_eager_training_on_global_tensors_matches_one_device(model, layout, nproc, extra):
    out = _launch(nproc, "graph_worker.py", "--model", model, "--layout", layout, "--eager",
                  *extra)
    assert out.count(" OK") == nproc, out
    assert "FAILED" not in out


# CUDA placements, "simulated": the runtime runs the GPU tasks on the host (OFL_SIMULATE_CUDA=1),
# so CI checks the plan's host/GPU copies, per-device memory and event-gated handovers across
# processes; "gpu": on the GPU itself, every rank sharing GPU 0 (OFL_CUDA_DEVICE=0, Note [The GPU
# of a rank]), registers crossing processes device -> host -> UCX -> host -> device.
@pytest.mark.parametrize("where", [
    pytest.param({"OFL_SIMULATE_CUDA": "1"}, id="simulated"),
    pytest.param({"OFL_CUDA_DEVICE": "0"}, id="gpu", marks=NEEDS_GPU),
])
@pytest.mark.parametrize("model,layout,nproc",
                         [("mlp", "dp2tp2", 4), ("gpt", "dp2zero", 2), ("gpt", "pp2", 2)])
def test_graph_training_on_cuda_placements_matches_one_device(model, layout, nproc, where):
    out = _launch(nproc, "graph_worker.py", "--model", model, "--layout", layout, "--device",
                  "cuda", **where)
    assert out.count(" OK") == nproc, out
    assert "FAILED" not in out


# Eager global training on CUDA placements: each op's one-op plan runs on the rank's GPU
# (simulated here as above; on a GPU every rank shares GPU 0).
@pytest.mark.parametrize("where", [
    pytest.param({"OFL_SIMULATE_CUDA": "1"}, id="simulated"),
    pytest.param({"OFL_CUDA_DEVICE": "0"}, id="gpu", marks=NEEDS_GPU),
])
def test_eager_training_on_cuda_placements_matches_one_device(where):
    out = _launch(2, "graph_worker.py", "--model", "gpt", "--layout", "tp2", "--eager",
                  "--device", "cuda", **where)
    assert out.count(" OK") == 2, out
    assert "FAILED" not in out


def test_checkpoint_saved_on_dp2tp2_resumes_on_pp2_and_one_rank(tmp_path):
    out = _launch(4, "checkpoint_worker.py", OFL_TEST_CHECKPOINT=str(tmp_path / "ckpt"))
    assert out.count("checkpoint OK") == 4, out
    manifest = (tmp_path / "ckpt" / "manifest.json").read_text()
    assert '"world_size": 4' in manifest and "model.head.weight.momentum" in manifest


def test_review_regressions_on_two_processes(tmp_path):
    out = _launch(2, "misc_worker.py", OFL_TEST_CHECKPOINT=str(tmp_path / "ckpt"))
    assert out.count("misc OK") == 2, out


# --- in one process ---
class _SquareLossGraph(flow.nn.Graph):
    """Trains ``model`` to output zeros: loss = mean(model(x) ** 2)."""

    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x):
        loss = (self.model(x) ** 2).mean()
        loss.backward()
        return loss


class _Linear(flow.nn.Graph):
    def __init__(self, model, opt=None):
        super().__init__()
        self.model = model
        if opt is not None:
            self.add_optimizer(opt)

    def build(self, x):
        return self.model(x)


def test_graph_inference_equals_eager():
    flow.manual_seed(1)
    model = flow.nn.Sequential(flow.nn.Linear(3, 5), flow.nn.ReLU(), flow.nn.Linear(5, 2))
    x = flow.randn(4, 3)
    got = _Linear(model)(x).numpy()
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-6)


def test_checkpoint_round_trip_and_sync_to_modules(tmp_path, variables):
    flow.manual_seed(2)
    model = flow.nn.Linear(3, 2)
    opt = flow.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)

    graph = _SquareLossGraph(model, opt)
    x = flow.randn(4, 3)
    graph(x)
    state = graph.state_dict()
    assert set(state) == {"model.weight", "model.bias", "model.weight.momentum",
                          "model.bias.momentum", "_graph.optimizer"}
    assert state["_graph.optimizer"]["step"] == 1
    flow.save(state, str(tmp_path / "c"))
    loaded = flow.load(str(tmp_path / "c"))
    assert loaded["_graph.optimizer"] == state["_graph.optimizer"]
    for name, value in state.items():
        if flow.is_tensor(value):
            np.testing.assert_array_equal(loaded[name].numpy(), value.numpy())
    # Bound, the module's tensor is the graph's variable: the step's values before any sync.
    before = model.weight.numpy().copy()
    assert np.array_equal(before, state["model.weight"].numpy()) == (variables == "bound")
    graph.sync_to_modules()
    np.testing.assert_array_equal(model.weight.numpy(), state["model.weight"].numpy())


def test_graph_errors_point_at_the_users_line():
    class Bad(flow.nn.Graph):
        def build(self, x):
            return flow.matmul(x, x)  # (4, 3) @ (4, 3): bad shapes

    with pytest.raises(ValueError) as info:
        Bad()(flow.randn(4, 3))
    message = str(info.value)
    assert "matmul" in message and "test_distributed_frontend.py:" in message, message


def test_graph_needs_backward_with_an_optimizer():
    model = flow.nn.Linear(3, 1)
    graph = _Linear(model, flow.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(RuntimeError, match="loss.backward"):
        graph(flow.randn(2, 3))


def test_lazy_tensor_has_no_value_in_build():
    class Peek(flow.nn.Graph):
        def build(self, x):
            return (x * 2).numpy()

    with pytest.raises(RuntimeError, match="no data until the graph runs"):
        Peek()(flow.randn(2, 2))


def test_gradient_accumulation_needs_a_divisible_batch():
    graph = _Linear(flow.nn.Linear(3, 1))
    graph.config.set_gradient_accumulation_steps(3)
    with pytest.raises(ValueError, match="must divide by 3"):
        graph(flow.randn(4, 3))


def test_bad_placement_and_sbp_inputs():
    with pytest.raises(ValueError, match="outside the world"):
        flow.placement("cpu", ranks=[0, 1])
    with pytest.raises(ValueError, match="distinct"):
        flow.placement("cpu", ranks=[0, 0])
    with pytest.raises(ValueError, match="non-negative"):
        flow.sbp.split(-1)
    p = flow.placement("cpu", ranks=[0])
    with pytest.raises(TypeError, match="flow.sbp"):
        flow.randn(2, 2, placement=p, sbp="B")
    with pytest.raises(IndexError, match="axis 3"):
        flow.randn(2, 2, placement=p, sbp=flow.sbp.split(3))


def _tiny_gpt_graph(recompute=False, scheduler=False):
    flow.manual_seed(5)
    blocks = flow.nn.ModuleList([flow.nn.CausalSelfAttention(8, 2, 4) for _ in range(2)])
    head = flow.nn.Linear(8, 5)
    opt = flow.optim.Adam(list(blocks.parameters()) + list(head.parameters()), lr=0.01)
    sch = flow.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5) if scheduler else None

    class Train(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.blocks, self.head = blocks, head
            self.add_optimizer(opt, lr_sch=sch)
            if recompute:
                self.set_activation_checkpointing(blocks[0])

        def build(self, x):
            for b in self.blocks:
                x = x + b(x)
            loss = (self.head(x) ** 2).mean()
            loss.backward()
            return loss

    return Train(), blocks, head, opt, sch


def test_activation_checkpointing_keeps_the_losses_and_saves_memory():
    x = flow.randn(2, 4, 8)
    plain, *_ = _tiny_gpt_graph()
    recomputed, *_ = _tiny_gpt_graph(recompute=True)
    a = [plain(x).item() for _ in range(3)]
    b = [recomputed(x).item() for _ in range(3)]
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert ".recompute" in recomputed._plan.text() and ".recompute" not in plain._plan.text()


def test_graph_steps_the_lr_scheduler_like_eager_training():
    x = flow.randn(2, 4, 8)
    graph, *_ = _tiny_gpt_graph(scheduler=True)
    got = [graph(x).item() for _ in range(3)]
    _, blocks, head, opt, sch = _tiny_gpt_graph(scheduler=True)
    expected = []
    for _ in range(3):
        opt.zero_grad()
        h = x
        for b in blocks:
            h = h + b(h)
        loss = (head(h) ** 2).mean()
        loss.backward()
        opt.step()
        sch.step()
        expected.append(loss.item())
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01 / 8)


def test_debug_prints_the_plan_summary(capsys, tmp_path):
    graph, *_ = _tiny_gpt_graph()
    graph.debug(1)
    with pytest.raises(RuntimeError, match=r"write_dot needs Train's plan, which the first call "
                                           r"makes .*call the graph once, then write_dot"):
        graph.write_dot(str(tmp_path / "early.dot"))
    graph(flow.randn(2, 4, 8))
    assert "plan 'Train'" in capsys.readouterr().out
    graph.write_dot(str(tmp_path / "plan.dot"))
    assert (tmp_path / "plan.dot").read_text().startswith("digraph")
    t = graph.timings
    assert 0 < t["trace_seconds"] < t["first_call_setup_seconds"] < t["first_step_seconds"]
    assert 0 < t["compile_seconds"] < t["first_call_setup_seconds"]
    assert graph.peak_bytes() > 0


def test_trace_records_the_acts_of_a_step():
    import json

    graph, *_ = _tiny_gpt_graph()
    graph.config.enable_trace()
    graph(flow.randn(2, 4, 8))
    events = json.loads(graph.chrome_trace())["traceEvents"]
    names = {e["name"] for e in events if e.get("ph") == "X"}
    assert any("adam_update" in n for n in names), sorted(names)[:10]


def test_graph_checks_inputs_against_the_trace():
    graph = _Linear(flow.nn.Linear(3, 1))
    graph(flow.randn(4, 3))
    with pytest.raises(ValueError, match=r"input 0 must be like .* \(4, 3\).* However, got .*\(2, 3\)"):
        graph(flow.randn(2, 3))


def test_graph_trains_float64_parameters():
    flow.manual_seed(3)
    model = flow.nn.Linear(3, 1, dtype=flow.float64)
    opt = flow.optim.Adam(model.parameters(), lr=0.1)

    x = flow.randn(4, 3, dtype=flow.float64)
    graph = _SquareLossGraph(model, opt)
    losses = [graph(x).item() for _ in range(3)]
    assert losses[2] < losses[0]


def test_a_failed_save_leaves_an_incomplete_checkpoint_not_a_mixed_one(tmp_path, monkeypatch):
    from oneflowlike.framework import checkpoint

    path = str(tmp_path / "c")
    flow.save({"a": flow.ones(3), "b": flow.zeros(2), "step": 4}, path)
    # An entry that is neither a tensor nor a JSON value is refused before anything is written.
    with pytest.raises(TypeError, match="'c' must be a tensor or a JSON value"):
        flow.save({"a": flow.zeros(3), "b": flow.ones(2), "c": object()}, path)
    assert flow.load(path)["step"] == 4
    # A save failing half-way leaves no manifest: the old checkpoint is gone, not mixed.
    writes = []

    def failing_write(file, write):
        writes.append(file)
        if len(writes) == 2:
            raise OSError("disk full")
        return real_write(file, write)

    real_write = checkpoint._atomic_write
    monkeypatch.setattr(checkpoint, "_atomic_write", failing_write)
    with pytest.raises(OSError, match="disk full"):
        flow.save({"a": flow.zeros(3), "b": flow.ones(2)}, path)
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint: it has pieces"):
        flow.load(path)
    with pytest.raises(FileNotFoundError, match="there is no checkpoint at .*does not exist"):
        flow.load(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="there is no checkpoint at .*no manifest.json "
                                                "and no rank pieces"):
        flow.load(str(tmp_path / "empty"))


def test_graph_config_and_placement_errors():
    config = flow.nn.Graph().config
    with pytest.raises(ValueError, match="gradient accumulation steps must be an int >= 1"):
        config.set_gradient_accumulation_steps(0)
    with pytest.raises(ValueError, match="ZeRO stage must be 1, 2 or 3. However, got 4"):
        config.enable_zero(stage=4)
    with pytest.raises(ValueError, match="gradient bucket size must be an int >= 0"):
        config.set_gradient_bucket_bytes(-1)
    if flow.cuda.is_available():
        assert flow.placement("cuda", ranks=[0]).type == "cuda"
    else:
        with pytest.raises(RuntimeError, match=r"\[placement\] device cuda needs a CUDA device. "
                                               "However, there is none: "):
            flow.placement("cuda", ranks=[0])
        assert flow.cuda.device_count() == 0 and flow.cuda.why_unavailable()
    with pytest.raises(ValueError, match="type must be 'cpu' or 'cuda'"):
        flow.placement("tpu", ranks=[0])


def test_env_reads_the_launch_contract(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        flow.env.get_world_size()


def test_donated_pieces_must_not_share_memory():
    # Note [Donated pieces]: two in-place writes into one buffer would mix.
    from oneflowlike.framework import global_tensor as gt

    on = flow.placement("cpu", ranks=[0])
    t = flow.ones(4)
    a = gt.local_to_global(t, on, flow.sbp.broadcast)
    b = gt.local_to_global(t.reshape(2, 2), on, flow.sbp.broadcast)
    with pytest.raises(ValueError, match="donated pieces must each have memory of their own"):
        gt.reshard_many([(a, on, (flow.sbp.broadcast,)), (b, on, (flow.sbp.broadcast,))],
                        donate=True)
    (moved,) = gt.reshard_many([(a, on, (flow.sbp.broadcast,))], donate=True)
    np.testing.assert_array_equal(moved.to_local().numpy(), np.ones(4))


def test_the_kept_launch_contract_follows_every_variable_it_read(monkeypatch):
    # process_launch_env parses again only when a variable its last parse read has changed:
    # each step below must give what a fresh parse (launch_env) gives, or the same error.
    import os

    from oneflowlike.distributed.env import launch_env, process_launch_env

    for name in ("SLURM_PROCID", "NODE_RANK", "MASTER_PORT", "OFL_FAULT_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    steps = [("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "2"),
             ("MASTER_ADDR", "10.0.0.1"), ("OFL_JOB_SECRET", "s"),
             ("SLURM_PROCID", "3"),        # not read while RANK is set: the kept parse stands
             ("OFL_FAULT_TIMEOUT", "2.5"), ("MASTER_PORT", "70000"), ("MASTER_PORT", "1234"),
             ("NODE_RANK", "7"), ("NODE_RANK", "1"), ("RANK", "3"), ("RANK", None),
             ("SLURM_NTASKS", "4"), ("SLURM_LOCALID", "1"), ("SLURM_NODEID", "1"),
             ("SLURM_TASKS_PER_NODE", "2(x2)"), ("SLURM_NODELIST", "n[1-2]")]
    for name, value in steps:
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
        try:
            want = launch_env(dict(os.environ))
        except ValueError as e:
            with pytest.raises(ValueError) as got:
                process_launch_env()
            assert str(got.value) == str(e), (name, value)
            continue
        assert process_launch_env() == want, (name, value)
        assert flow.env.get_rank() == want["rank"], (name, value)
    assert process_launch_env()["master_addr"] == "10.0.0.1"  # MASTER_ADDR beats Slurm's


def test_bfloat16_entries_save_and_load_exactly(tmp_path):
    # numpy has no bfloat16: the pieces go to disk as float32 (exact) and come back narrowed.
    values = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    weight = flow.tensor(values).to(flow.bfloat16)
    path = str(tmp_path / "bf16")
    flow.save({"w": weight, "m": flow.tensor(values)}, path)
    for loaded in (flow.load(path), flow.load(path, like={"w": weight, "m": flow.zeros(4, 5)})):
        assert loaded["w"].dtype == flow.bfloat16 and loaded["m"].dtype == flow.float32
        np.testing.assert_array_equal(loaded["w"].numpy(), weight.numpy())
        np.testing.assert_array_equal(loaded["m"].numpy(), values)
    with pytest.raises(ValueError, match=r"'w' was saved as bfloat16. However, the target is "
                                         r"float32"):
        flow.load(path, like={"w": flow.zeros(4, 5)})
