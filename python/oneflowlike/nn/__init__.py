"""Neural-network building blocks (flow.nn). Modules arrive with the Python front-end issue;
``flow.nn.functional`` holds the functional forms."""

from oneflowlike.nn import functional  # noqa: F401
