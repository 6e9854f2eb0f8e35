"""The torch device a command runs on (``--device auto|cpu|cuda[:N]``)."""

from __future__ import annotations

import torch

from .errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when available, else the CPU; ConfigError when CUDA is asked for but absent."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but no CUDA device is available; use --device cpu")
    return torch.device(name)
