"""Optimizers (flow.optim) over the fused update ops."""
