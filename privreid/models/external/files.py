"""Reading an untrusted model file once, without executing it, and what a kind of model file is.

Every torch file is read by :func:`privreid.checkpoint.read_torch_file`
(:func:`privreid.pickle_scan.safe_torch_load`), which rebuilds tensors, containers and metadata's numpy scalars
only; a refusal names the global and says nothing was executed.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from privreid import checkpoint
from privreid.errors import NotACheckpointError


@dataclass(frozen=True)
class ModelFile:
    """A kind of model file: ``detect(path, obj) -> bool`` and ``load(path, obj, options) -> ReIDAdapter``;
    ``obj`` is what :func:`read_torch_file` read (:func:`was_read` false for ONNX ...), ``options``
    :func:`~privreid.models.external.load_any_model`'s keywords."""

    name: str
    description: str
    detect: Callable[[Path, Any], bool]
    load: Callable[..., Any]


_NOT_READ = object()


def read_torch_file(path: str | os.PathLike, what: str = "a model file") -> Any:
    """What the torch file ``path`` holds, read once on the CPU; CheckpointError for an unsafe file (one
    ``what`` never holds) or one cut short, :data:`_NOT_READ` (:func:`was_read` is false) for a file that is no
    torch pickle (a TorchScript archive, ONNX, no model file)."""
    if Path(path).is_file() and is_torchscript_archive(Path(path)):  # torch.jit.save's archive: its pickles name its compiled classes
        return _NOT_READ
    try:
        return checkpoint.read_torch_file(path, "cpu", what=what)
    except NotACheckpointError:
        return _NOT_READ


def is_torchscript_archive(path: Path) -> bool:
    """Whether ``path`` is a zip archive written by ``torch.jit.save`` (``constants.pkl`` and ``code/``)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    return any(n.endswith("constants.pkl") for n in names) and any("/code/" in n for n in names)


def was_read(obj: Any) -> bool:
    """Whether :func:`read_torch_file` read a torch pickle."""
    return obj is not _NOT_READ


def strip_prefix(state: dict[str, Any], prefix: str = "module.") -> dict[str, Any]:
    """``state`` with ``prefix`` (DataParallel's ``module.``) removed from every key that has it."""
    return {k.removeprefix(prefix): v for k, v in state.items()}


def tensor_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    """``obj`` if it is a non-empty dict of tensors keyed by strings, else ``None``."""
    if isinstance(obj, dict) and obj and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                             for k, v in obj.items()):
        return obj
    return None
