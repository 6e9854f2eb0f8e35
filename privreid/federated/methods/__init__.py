"""Federated methods: one module each; importing this package registers them."""

from . import fedpav  # noqa: F401
from . import fedreid  # noqa: F401
