"""Old public names kept for one release after a rename: each resolves to its new name with a DeprecationWarning.

privreid spells "defense" in identifiers (the package is ``privreid.defenses``);
the names that were spelled "defence" stay importable through a module-level
``__getattr__`` (PEP 562) made by :func:`renamed_names`, and the two renamed
modules through small modules under their old names.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import ModuleType


def warn_renamed(old: str, new: str) -> None:
    """The one-line DeprecationWarning of an old name, reported at the caller's import or attribute access."""
    warnings.warn(f"{old} is renamed {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)


def renamed_names(module: str, renames: dict[str, str],
                  fallback: Callable[[str], object] | None = None) -> Callable[[str], object]:
    """``__getattr__`` for ``module``: each old name of ``renames`` (old -> new) gives ``module``'s new name, with a
    DeprecationWarning; any other name goes to ``fallback`` (a package's lazy exports) or is an AttributeError."""

    def __getattr__(name: str):
        if name in renames:
            warn_renamed(f"{module}.{name}", renames[name])
            return getattr(sys.modules[module], renames[name])
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def renamed_module(old: str, new: ModuleType) -> None:
    """Make the module under the old name ``old`` the renamed module ``new`` itself (its old names included),
    with a DeprecationWarning; called by the few lines left at the old path."""
    warn_renamed(old, new.__name__)
    sys.modules[old] = new
