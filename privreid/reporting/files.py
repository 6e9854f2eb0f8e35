"""Writing report files: CSV tables and matplotlib figures, one way for every subsystem."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


def write_csv_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write dict rows as CSV; the columns are the union of the rows' keys, in first-seen order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def save_figure(fig, path: str | Path, *, title: str | None = None) -> Path:
    """Add an optional suptitle, lay out, write ``fig`` as a 120-dpi PNG (creating folders) and close it."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
