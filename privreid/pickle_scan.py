"""Name the globals a pickle would import, without executing it (for the refusal of an unsafe checkpoint).

:func:`privreid.checkpoint.load_checkpoint` loads with
``torch.load(weights_only=True)``, which refuses anything but tensors and
containers; its message does not always say what was refused (a plain
protocol-4 pickle fails on an opcode first).  :func:`pickle_globals` reads
the opcodes with :mod:`pickletools` (which never executes them) and lists the
``module.name`` globals, so the refusal can name the offending one.
"""

from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path

#: globals a torch checkpoint holds legitimately
SAFE_PREFIXES = ("torch.", "collections.OrderedDict", "builtins.set", "_codecs.encode", "numpy.")


def pickle_globals(path: str | Path) -> list[str]:
    """The ``module.name`` globals of the pickle in ``path`` (a torch zip file: its ``data.pkl``)."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.endswith("data.pkl")]
            data = zf.read(names[0]) if names else b""
    else:
        data = path.read_bytes()
    return _globals(data)


def archive_globals(path: str | Path) -> list[str]:
    """The ``module.name`` globals of every pickle (``*.pkl``) in the zip archive ``path`` (a TorchScript file)."""
    with zipfile.ZipFile(path) as zf:
        return [g for name in zf.namelist() if name.endswith(".pkl") for g in _globals(zf.read(name))]


def _globals(data: bytes) -> list[str]:
    """The ``module.name`` globals the pickle ``data`` imports, read with :mod:`pickletools` (never executed)."""
    found, strings = [], []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name == "GLOBAL":
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:  # noqa: BLE001 - a malformed pickle: report what was read so far
        pass
    return found


def unsafe_global(path: str | Path) -> str | None:
    """The first global of ``path``'s pickle that a checkpoint never holds; ``None`` if there is none."""
    try:
        return next((g for g in pickle_globals(path) if not g.startswith(SAFE_PREFIXES)), None)
    except OSError:
        return None
