"""flow.utils: data loading (flow.utils.data), with torch.utils's names."""

from oneflowlike.utils import data  # noqa: F401
