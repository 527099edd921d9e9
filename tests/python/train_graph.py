"""The smallest training graph the nn.Graph tests build: cross-entropy of the model's output,
one optimizer (and optionally an LR scheduler)."""

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
