"""Writing output files, one way for every subsystem: atomic writers, CSV tables, figures, Markdown tables.

Every output file goes through :func:`write_file_atomically` (or :func:`write_text_atomic`,
:func:`write_json_atomic`, :func:`save_torch_atomic`): a temporary sibling, then a rename, so no reader sees a
half-written file and a failed write leaves the old one. ``torch.save`` goes through :func:`save_torch` (a
failed write is its OSError). A rename never replaces a non-regular file: a FIFO or character device is written
through for stream-able outputs (reports, JSON, tables, figures, state-dict exports) and refused in one line for
outputs that must be files (``stream=False``: checkpoints, memories, ONNX, the SecAgg+ site state); a
directory, block device or socket is always refused. Files get the umask's permissions; only secrets (the
SecAgg+ site state, :mod:`privreid.defenses.secure_aggregation.flower`) are written 0600."""

from __future__ import annotations

import csv
import json
import math
import os
import stat
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

from privreid.errors import PrivreidError


class OutputError(PrivreidError):
    """An output path cannot be written (a file in the way, read-only, disk full ...)."""


#: kinds of non-regular file, by ``stat.S_IFMT``, a writer refuses
_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}
#: non-regular files a stream can be written through to
_STREAMS = (stat.S_IFIFO, stat.S_IFCHR)


#: the suffix of privreid's temporary files: what a killed write leaves is told from a user's own ``.tmp`` files
TEMPORARY_SUFFIX = ".privreid.tmp"


def write_file_atomically(path: Path, write: Callable[[Path], None], *, stream: bool = True) -> None:
    """``write(tmp)`` on ``.<name>`` + :data:`TEMPORARY_SUFFIX` beside ``path``, then rename it onto ``path``
    (a whole folder: :func:`privreid.data.synthetic_cache.write_atomically`). A ``write`` that raises leaves no
    temporary file and ``path`` unchanged; non-regular files as the module says (written through: ``write(path)``)."""
    path = Path(path)
    try:
        kind = stat.S_IFMT(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        kind = stat.S_IFREG
    if kind != stat.S_IFREG:
        if not (stream and kind in _STREAMS):
            raise OutputError(f"{path} is {_KINDS.get(kind, 'not a regular file')}; give the path of a "
                              "regular file (it is never replaced)")
        write(path)
        return
    tmp = path.with_name(f".{path.name}{TEMPORARY_SUFFIX}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file (never half-written, never a 0-byte file)."""
    write_file_atomically(Path(path), lambda tmp: tmp.write_text(text))


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float in it (dicts, lists, tuples) replaced by ``None``: valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as sorted, indented JSON to ``path`` through a temporary file (never half-written)."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True))


class _WriteRecorder:
    """A binary file for ``torch.save`` that keeps the OSError its ``write`` raised (see :func:`save_torch`)."""

    def __init__(self, fh):
        self.fh, self.error = fh, None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def save_torch(obj: Any, path: Path, *, sync: bool = False) -> None:
    """``torch.save(obj)`` to ``path`` (``sync``: then ``fsync``); a failed write raises its OSError. torch
    reports most failed writes as an errno-less ``RuntimeError``; :class:`_WriteRecorder` turns exactly those
    that follow a failed write into its OSError."""
    import torch

    with open(path, "wb") as fh:
        recorder = _WriteRecorder(fh)
        try:
            torch.save(obj, recorder)
        except RuntimeError as exc:
            if recorder.error is None:
                raise
            raise recorder.error from exc
        fh.flush()
        if sync:
            os.fsync(fh.fileno())


def save_torch_atomic(obj: Any, path: Path, *, stream: bool = True) -> None:
    """:func:`save_torch` through :func:`write_file_atomically`."""
    write_file_atomically(Path(path), lambda tmp: save_torch(obj, tmp), stream=stream)


def write_csv_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write dict rows as CSV; the columns are the union of the rows' keys, in first-seen order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)

    write_file_atomically(path, write)
    return path


def pyplot():
    """``matplotlib.pyplot`` on the Agg back end (files only, no display), imported when a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, *, title: str | None = None) -> Path:
    """Add an optional suptitle, lay out, write ``fig`` as a 120-dpi PNG (creating folders) and close it."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    savefig_atomic(fig, path, dpi=120)
    plt.close(fig)
    return path


def savefig_atomic(fig, path: str | Path, **kwargs: Any) -> None:
    """``fig.savefig`` in ``path``'s suffix's format through :func:`write_file_atomically`, rendered in memory
    first so a FIFO is written through (image writers want a seekable file)."""
    buffer = BytesIO()
    fig.savefig(buffer, format=Path(path).suffix[1:].lower() or None, **kwargs)
    write_file_atomically(Path(path), lambda tmp: tmp.write_bytes(buffer.getvalue()))


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table; floats in [0, 1] are shown as percentages, missing as '-'."""
    if not rows:
        return ""
    headers = list(rows[0])

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{100 * v:.1f}"
        return str(v)

    body = [[cell(r.get(h)) for h in headers] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(b) for b in body)])
