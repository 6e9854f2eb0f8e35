"""Writing report files: CSV tables and matplotlib figures, one way for every subsystem (atomically)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from privreid.rundir import write_file_atomically


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
    """``fig.savefig`` in the format of ``path``'s suffix, written by :func:`privreid.rundir.write_file_atomically`.

    The figure is rendered in memory first: a FIFO at ``path`` is then written through (image writers
    open their file seekable, which a FIFO is not).
    """
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix[1:].lower() or None, **kwargs)
    write_file_atomically(Path(path), lambda tmp: tmp.write_bytes(buffer.getvalue()))
