"""Third-party packages that only some commands need: one-line install hints instead of tracebacks.

``pip install privreid`` installs everything the core commands use, torchattacks
included (docs/install.md).  Flower (``privreid[flower]``), its simulation engine on Ray (``privreid[simulation]``) and the ONNX
exporter (``privreid[export]``) are extras, and so are the metric mirrors of
``privreid train --logger`` (``privreid[tensorboard]``, ``privreid[wandb]``).  A command that needs a package
calls :func:`require` before any work is done; a missing package then becomes a
:class:`~privreid.errors.MissingDependencyError` (one ``error:`` line, exit
status 2) that says what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from privreid.errors import MissingDependencyError

#: torchattacks release that ``pip install privreid`` installs (see pyproject.toml for why this one).
TORCHATTACKS = "torchattacks>=3.3.0,<3.4"

#: importable name -> (what needs it, what to install)
PACKAGES: dict[str, tuple[str, str]] = {
    "torchattacks": ("the adversarial attacks (privreid attack, compare --suite attacks, sweep)",
                     f"pip install '{TORCHATTACKS}'"),
    "flwr": ("privreid flower", "pip install 'privreid[flower]'"),
    "ray": ("privreid train --parallel-clients", "pip install 'privreid[simulation]'"),
    "onnx": ("privreid export --format onnx", "pip install 'privreid[export]'"),
    "onnxscript": ("privreid export --format onnx", "pip install 'privreid[export]'"),
    "onnxruntime": ("privreid export --format onnx", "pip install 'privreid[export]'"),
    "tensorboard": ("privreid train --logger tensorboard", "pip install 'privreid[tensorboard]'"),
    "wandb": ("privreid train --logger wandb", "pip install 'privreid[wandb]'"),
}


def require(name: str, needed_by: str | None = None) -> ModuleType:
    """Import the package ``name`` (a key of :data:`PACKAGES`), or raise :class:`MissingDependencyError`.

    ``needed_by`` names what needs it when that is not the package's usual user.

    Only a *missing* module is turned into the hint (the package itself, or a
    module it imports, e.g. scipy for torchattacks); any other import error
    is a bug and propagates.
    """
    usual, install = PACKAGES[name]
    needed_by = needed_by or usual
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = name if exc.name in (None, name) else f"{name} (it cannot import {exc.name})"
        raise MissingDependencyError(f"{needed_by} needs {missing}, which is not installed: {install}") from None
