"""Optimizers (flow.optim) over the fused update ops, and learning-rate schedulers
(flow.optim.lr_scheduler)."""

from oneflowlike.optim import lr_scheduler
from oneflowlike.optim.adam import Adam, AdamW
from oneflowlike.optim.optimizer import Optimizer
from oneflowlike.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
