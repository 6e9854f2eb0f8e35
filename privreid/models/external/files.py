"""Reading an untrusted model file without executing it, and the registry of model file kinds.

Every torch file is read with :func:`privreid.pickle_scan.safe_torch_load`
(``torch.load(weights_only=True)`` after a scan of the pickle), which rebuilds
tensors, containers and the numpy scalars of other projects' metadata only;
a refusal names the offending global and says that nothing was executed.
"""

from __future__ import annotations

import os
import pickle
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from privreid.errors import CheckpointError


@dataclass(frozen=True)
class ModelFile:
    """A kind of model file: ``detect(path, obj) -> bool`` and ``load(path, obj, options) -> ReIDAdapter``.

    ``obj`` is what :func:`read_torch_file` read (``None`` for a file that is
    no torch pickle, such as ONNX); ``options`` are
    :func:`~privreid.models.external.load_any_model`'s keyword arguments.
    """

    name: str
    description: str
    detect: Callable[[Path, Any], bool]
    load: Callable[..., Any]


_NOT_READ = object()


def read_torch_file(path: str | os.PathLike) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; CheckpointError for an unsafe file, :data:`_NOT_READ`
    (:func:`was_read` is false) for a file that is no torch pickle."""
    from privreid.pickle_scan import UnsafePickle, looks_like_pickle, safe_torch_load

    path = Path(path)
    if is_torchscript_archive(path):  # torch.jit.save's archive: its pickles name its compiled classes
        return _NOT_READ
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return safe_torch_load(path, map_location="cpu")
    except pickle.UnpicklingError as exc:
        found = exc.found if isinstance(exc, UnsafePickle) else None
        if found is None and not looks_like_pickle(path):  # not a pickle at all (ONNX, noise): another kind or none
            return _NOT_READ
        what = f"the global {found}" if found else "objects that are not plain tensors/containers"
        raise CheckpointError(f"refusing to load {path}: it contains {what}, which a model file never holds "
                              "(nothing was executed)") from exc
    except Exception:  # noqa: BLE001 - not a torch pickle: a TorchScript archive, ONNX, or no model file
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
