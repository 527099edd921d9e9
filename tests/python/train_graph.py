"""The smallest training graph the nn.Graph tests build: cross-entropy of the model's output,
one optimizer (and optionally an LR scheduler)."""

import oneflowlike as flow
import oneflowlike.nn as nn


class TrainGraph(nn.Graph):
    def __init__(self, model, opt, scheduler=None):
        super().__init__()
        self.model = model
        self.add_optimizer(opt, lr_sch=scheduler)

    def build(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


class LossGraph(nn.Graph):
    """A training graph of ``loss_of(model, *inputs)``."""

    def __init__(self, model, opt, loss_of):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self._loss_of = loss_of

    def build(self, *inputs):
        loss = self._loss_of(self.model, *inputs)
        loss.backward()
        return loss


def seeded_linear(n_in, n_out, lr, seed):
    """A ``make`` for eager_and_graph_losses: nn.Linear(n_in, n_out) built after
    manual_seed(seed), so both runs start from the same weights, with SGD at ``lr``."""

    def make():
        flow.manual_seed(seed)
        model = nn.Linear(n_in, n_out)
        return model, flow.optim.SGD(model.parameters(), lr=lr)

    return make


def eager_and_graph_losses(make, loss_of, inputs, steps=3):
    """The losses of ``steps`` training steps eagerly and in a graph, each from ``make()``'s
    (model, optimizer), with the loss ``loss_of(model, *inputs)``."""
    model, opt = make()
    eager = []
    for _ in range(steps):
        loss = loss_of(model, *inputs)
        opt.zero_grad()
        loss.backward()
        opt.step()
        eager.append(float(loss.numpy()))
    model, opt = make()
    graph = LossGraph(model, opt, loss_of)
    return eager, [float(graph(*inputs).numpy()) for _ in range(steps)]
