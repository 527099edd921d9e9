"""Resuming nn.Graph training from graph.state_dict() (issue 14, item 2): the optimizer's step
count, its hyper-parameters and the LR scheduler's state travel with the variables, so a run
saved and resumed gives exactly the uninterrupted curve (dist/resume_worker.py, on 1 and 2
processes, same layout and across layouts)."""

import pytest

import oneflowlike as flow
from launching import launch


@pytest.mark.parametrize("nproc,layouts,cross", [
    (1, "local,global1", ""),
    (2, "dp2,tp2", "dp2:tp2"),
])
def test_resume_gives_the_uninterrupted_curve(tmp_path, nproc, layouts, cross):
    extra = ["--cross", cross] if cross else []
    out = launch(nproc, "resume_worker.py", "--layouts", layouts, *extra, timeout=600,
                 OFL_TEST_CHECKPOINT=str(tmp_path))
    runs = 9 * (len(layouts.split(",")) + (1 if cross else 0))
    assert out.count(f"resume OK ({runs} runs)") == nproc, out


def test_async_save_writes_the_values_at_the_call_while_the_program_goes_on(tmp_path):
    out = launch(2, "async_save_worker.py", OFL_TEST_CHECKPOINT=str(tmp_path))
    assert out.count("async save OK") == 2, out


def test_async_save_in_one_process_and_its_handle(tmp_path):
    model = flow.nn.Linear(4, 3)
    before = model.weight.numpy().copy()
    handle = flow.async_save(model.state_dict(), str(tmp_path / "ckpt"))
    with flow.no_grad():
        model.weight.add_(1.0)
    assert handle.wait() == str(tmp_path / "ckpt") and handle.done()
    assert handle.wait() == str(tmp_path / "ckpt")  # again: nothing more to do
    assert (flow.load(str(tmp_path / "ckpt"))["weight"].numpy() == before).all()
    # Not waited for, a save is not a checkpoint yet: no manifest, refused by load.
    flow.async_save(model.state_dict(), str(tmp_path / "pending"))
    with pytest.raises((ValueError, FileNotFoundError), match="manifest"):
        flow.load(str(tmp_path / "pending"))


def test_pieces_are_written_as_np_save_writes_them():
    # Hashed as they are written (Note [Asynchronous saves]): the bytes of np.save, 0-d, empty
    # and strided arrays included (an empty piece is what a rank holds of a short split).
    import hashlib
    import io

    import numpy as np

    from oneflowlike.framework import checkpoint

    for array in (np.array(2.5, np.float32), np.zeros((0, 3), np.float32),
                  np.zeros((3, 0, 2), np.int8), np.arange(12).reshape(3, 4)[:, ::2],
                  np.array(True), np.zeros(0, np.float16)):
        ours, theirs = io.BytesIO(), io.BytesIO()
        digest = checkpoint._write_npy(ours, array)
        np.save(theirs, array)
        assert ours.getvalue() == theirs.getvalue(), array.shape
        assert digest == hashlib.sha256(theirs.getvalue()).hexdigest()


def test_a_second_save_to_a_path_commits_the_first_and_a_failed_one_stays_failed(
        tmp_path, monkeypatch):
    from oneflowlike.framework import checkpoint

    path = str(tmp_path / "ckpt")
    first = flow.async_save({"x": flow.ones(1000)}, path)
    second = flow.async_save({"x": flow.zeros(1000)}, path)  # waits for the first
    assert first.done() and second.wait() == path
    assert (flow.load(path)["x"].numpy() == 0).all()

    def broken(f, array):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(checkpoint, "_write_npy", broken)
    failed = flow.async_save({"x": flow.ones(3)}, str(tmp_path / "failed"))
    for _ in range(2):
        with pytest.raises(OSError, match="Input/output error"):
            failed.wait()


class _Square(flow.nn.Graph):
    def __init__(self, model, opt, schedule=None):
        super().__init__()
        self.model = model
        self.add_optimizer(opt, lr_sch=schedule)

    def build(self, x):
        loss = (self.model(x) ** 2).mean()
        loss.backward()
        return loss


def _graph(schedule=False):
    flow.manual_seed(0)
    model = flow.nn.Linear(3, 2)
    opt = flow.optim.Adam(model.parameters(), lr=0.1)
    sched = flow.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5) if schedule else None
    return _Square(model, opt, sched), opt


def test_step_count_is_read_only_and_comes_back_with_the_state():
    graph, _ = _graph(schedule=True)
    x = flow.randn(4, 3)
    graph(x)
    graph(x)
    with pytest.raises(AttributeError):
        graph.step_count = 5
    state = graph.state_dict()
    assert state["_graph.optimizer"]["step"] == 2
    assert state["_graph.lr_scheduler"]["last_epoch"] == 2
    fresh, opt = _graph(schedule=True)
    fresh.load_state_dict(state)  # before the first call: applied at once, variables later
    assert fresh.step_count == 2
    assert opt.param_groups[0]["lr"] == pytest.approx(0.025)


def test_loading_refuses_a_state_without_the_training_state_unless_not_strict():
    graph, _ = _graph()
    graph(flow.randn(4, 3))
    state = graph.state_dict()
    del state["_graph.optimizer"]
    fresh, _ = _graph()
    with pytest.raises(KeyError, match="needs '_graph.optimizer'"):
        fresh.load_state_dict(state)
    fresh.load_state_dict(state, strict=False)
    assert fresh.step_count == 0


def test_changing_a_compiled_hyper_parameter_is_refused():
    graph, opt = _graph()
    x = flow.randn(4, 3)
    graph(x)
    opt.param_groups[0]["lr"] = 0.05  # fed every step: fine
    graph(x)
    opt.param_groups[0]["weight_decay"] = 0.1
    with pytest.raises(ValueError, match=r"weight_decay changed after _Square compiled "
                                         r"\(weight_decay=0.0 -> weight_decay=0.1\)"):
        graph(x)
