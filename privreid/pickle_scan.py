"""The one way privreid reads a torch file: scan its pickle for globals, then ``torch.load(weights_only=True)``.

Every ``torch.load`` goes through :func:`safe_torch_load`. ``weights_only=True`` can be weakened by the
environment (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``) and its refusal does not always say what was refused, so
the pickle is read first with :mod:`pickletools`, which never executes it: a file naming a global outside
:data:`SAFE_PREFIXES` (:func:`pickle_globals`) is refused with :class:`UnsafePickle` before unpickling. The scan
is fail-closed (an untracked global counts as unsafe). Legacy-format files (several pickles; the first is
scanned) load, with ``weights_only=True`` passed explicitly. numpy's scalar constructor, ``numpy.dtype`` and its
plain dtype classes (:data:`NUMPY_METADATA`: torchreid stores ``rank1`` as numpy float32) are allowed for the
scan and the load; any other numpy global is refused by name.
"""

from __future__ import annotations

import os
import pickle
import pickletools
import re
import zipfile
from pathlib import Path
from typing import Any

#: numpy's dtype classes a scalar in a checkpoint's metadata may carry (``numpy.dtypes``); object, void and
#: variable-width string dtypes are left out: their values are Python objects, not numbers or fixed-width text
_NUMPY_DTYPE_CLASSES = ("Bool", "Byte", "Bytes", "CLongDouble", "Complex128", "Complex64", "DateTime64", "Float16",
                        "Float32", "Float64", "Int16", "Int32", "Int64", "Int8", "Int", "Long", "LongDouble",
                        "LongLong", "Short", "Str", "TimeDelta64", "UByte", "UInt16", "UInt32", "UInt64", "UInt8",
                        "UInt", "ULong", "ULongLong", "UShort")
#: the numpy globals of a numpy scalar in a checkpoint's metadata (torchreid's ``rank1``): its constructor
#: (numpy 2's module name and numpy 1's), ``numpy.dtype`` and the dtype classes above
NUMPY_METADATA = ("numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar", "numpy.dtype",
                  *(f"numpy.dtypes.{name}DType" for name in _NUMPY_DTYPE_CLASSES))
#: globals a torch checkpoint holds legitimately (prefixes; the numpy names are exact): torch's, its default
#: weights-only allow-list's containers (a multi-step scheduler's milestones are a Counter)
SAFE_PREFIXES = ("torch.", "collections.OrderedDict", "collections.Counter", "builtins.set", "_codecs.encode")
#: what :func:`pickle_globals` reports for a global whose name it cannot follow
UNKNOWN_GLOBAL = "<a global built from the pickle memo>"
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
               "SHORT_BINSTRING"}


class UnsafePickle(pickle.UnpicklingError):
    """A torch file whose pickle would import something a file of tensors never holds (nothing was executed)."""

    def __init__(self, path: Path, found: str):
        super().__init__(f"{path} contains the global {found}, which a torch file of tensors never holds "
                         "(nothing was executed)")
        self.found = found


def _pickles(path: Path) -> list[bytes]:
    """The pickle ``torch.load`` reads from ``path``: a zip's ``data.pkl`` member, or the whole file otherwise
    (:func:`archive_globals` scans every pickle of a TorchScript archive)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            return [zf.read(n) for n in zf.namelist() if n.endswith("data.pkl")]
    return [path.read_bytes()]


def _globals_of(data: bytes) -> list[str]:
    found: list[str] = []
    pushed: list[str | None] = []  # what each opcode pushed, when it is a string; None otherwise
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("GLOBAL", "INST"):
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL":
                module, name = (pushed[-2:] + [None, None])[:2] if len(pushed) >= 2 else (None, None)
                found.append(f"{module}.{name}" if module is not None and name is not None else UNKNOWN_GLOBAL)
            if op.name == "MEMOIZE":
                memo[len(memo)] = pushed[-1] if pushed else None
            elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = pushed[-1] if pushed else None
            elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                pushed.append(memo.get(int(arg)))
            elif op.name in _STRING_OPS:
                pushed.append(str(arg))
            else:
                pushed.append(None)
    except Exception:  # noqa: BLE001 - a malformed pickle: what was read so far (torch refuses the rest)
        pass
    return found


def pickle_globals(path: str | os.PathLike) -> list[str]:
    """The ``module.name`` globals of the pickle in ``path`` (a torch zip file: its ``data.pkl``)."""
    return [g for data in _pickles(Path(path)) for g in _globals_of(data)]


def archive_globals(path: str | os.PathLike) -> list[str]:
    """The ``module.name`` globals of every pickle (``*.pkl``) in the zip archive ``path`` (a TorchScript file)."""
    with zipfile.ZipFile(path) as zf:
        return [g for name in zf.namelist() if name.endswith(".pkl") for g in _globals_of(zf.read(name))]


def is_safe_global(name: str) -> bool:
    """Whether a checkpoint may hold the global ``name`` (:data:`SAFE_PREFIXES`, :data:`NUMPY_METADATA`)."""
    return name.startswith(SAFE_PREFIXES) or name in NUMPY_METADATA


def numpy_metadata_globals() -> list[Any]:
    """``(object, name)`` for each name of :data:`NUMPY_METADATA` this numpy has, for
    ``torch.serialization.safe_globals``: torch allow-lists the object under that name, so a file written under
    numpy 1 (``numpy.core.multiarray.scalar``) loads under numpy 2, whose object is named ``numpy._core...``."""
    import importlib
    import warnings

    found = []
    for name in NUMPY_METADATA:
        # the object under either numpy's module name: numpy 1 has no numpy._core, numpy 2 deprecates numpy.core
        for spelling in dict.fromkeys([name, name.replace("numpy._core.", "numpy.core."),
                                       name.replace("numpy.core.", "numpy._core.")]):
            module, _, attr = spelling.rpartition(".")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    found.append((getattr(importlib.import_module(module), attr), name))
                break
            except (ImportError, AttributeError):  # numpy 1 has no numpy.dtypes (or fewer dtype classes)
                continue
    return found


def unsafe_global(path: str | os.PathLike) -> str | None:
    """The first global of ``path``'s pickle that a checkpoint never holds; ``None`` if there is none."""
    try:
        return next((g for g in pickle_globals(path) if not is_safe_global(g)), None)
    except (OSError, zipfile.BadZipFile):
        return None


def looks_like_pickle(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a torch zip file (with a ``data.pkl``) or starts like a binary pickle (protocol 2+):
    a file that is neither (text, ONNX, noise) is no checkpoint at all, not a refused one."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            return any(name.endswith("data.pkl") for name in zf.namelist())
    with open(path, "rb") as f:
        return f.read(1) == b"\x80"


#: the global in torch's weights-only refusal (``Unsupported global: GLOBAL numpy.random.RandomState was not ...``)
_REFUSED = re.compile(r"GLOBAL ([\w.]+) was not an allowed global")


def safe_torch_load(path: str | os.PathLike, **kwargs: Any) -> Any:
    """``torch.load(path, weights_only=True, **kwargs)`` after the scan: :class:`UnsafePickle` (a
    :class:`pickle.UnpicklingError`) naming the global, nothing executed; other failures are torch's."""
    import torch

    path = Path(path)
    found = unsafe_global(path)  # a bare pickle too: its refusal names what it would have imported
    if found is not None:
        raise UnsafePickle(path, found)
    try:
        with torch.serialization.safe_globals(numpy_metadata_globals()):
            return torch.load(path, weights_only=True, **kwargs)
    except pickle.UnpicklingError as exc:  # torch's refusal: name the global it refused when it says which
        refused = _REFUSED.search(str(exc))
        if refused is None:
            raise
        raise UnsafePickle(path, refused.group(1)) from exc

