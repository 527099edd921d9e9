"""Optimizers (flow.optim) over the fused update ops."""

from oneflowlike.optim.adam import Adam, AdamW
from oneflowlike.optim.optimizer import Optimizer
from oneflowlike.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
