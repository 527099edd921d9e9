"""flow.utils: data loading (flow.utils.data) and activation checkpointing
(flow.utils.checkpoint), with torch.utils's names."""

from oneflowlike.utils import checkpoint, data  # noqa: F401
