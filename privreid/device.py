"""The torch device a command runs on (``--device auto|cpu|cuda|cuda:N``).

A device name is checked in two steps: its spelling without torch
(:func:`is_device_name`: the CLI's ``--device`` type refuses a misspelt name
while it parses, before anything imports torch), then whether this machine
has it (:func:`resolve_device`, which imports torch).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from privreid.errors import ConfigError

if TYPE_CHECKING:
    import torch

#: the names ``--device`` takes, as its help shows them: CUDA when available, the CPU, a CUDA device
DEVICE_METAVAR = "[auto|cpu|cuda|cuda:N]"
_DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")


def is_device_name(name: object) -> bool:
    """Whether ``name`` is spelt as :data:`DEVICE_METAVAR` says (``auto``, ``cpu``, ``cuda``, ``cuda:N``)."""
    return isinstance(name, str) and _DEVICE_NAME.fullmatch(name) is not None


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when available, else the CPU; ConfigError for a name not in :data:`DEVICE_METAVAR` and for a
    device this machine does not have."""
    import torch

    if not is_device_name(name):
        raise ConfigError(f"--device must be one of {DEVICE_METAVAR}, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but no CUDA device is available; use --device cpu")
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        raise ConfigError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                          f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return torch.device(name)
