"""Packages whose public names are imported on first use, so importing the package stays light.

``privreid``, ``privreid.data`` and ``privreid.inversion`` re-export
names from modules that import torch; the CLI imports these packages to
build its options and its ``--help`` (which must not wait for torch), so
each package maps its public names to their modules and resolves them in a
module-level ``__getattr__`` (PEP 562) made by :func:`lazy_exports`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, names: dict[str, tuple[str, str]]) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package`` that import ``names`` (public name -> (module, attribute),
    the module absolute or relative to ``package``) when first asked for."""

    def __getattr__(name: str):
        if name in names:
            module, attribute = names[name]
            return getattr(import_module(module, package), attribute)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
