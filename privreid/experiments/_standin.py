"""STAND-IN until H6b's privreid.experiments.statistics / frontier land (deleted then)."""

from __future__ import annotations

import math
from pathlib import Path


def cell_statistics(outcomes: list, metrics: list[str]) -> list[dict]:
    cells: dict[tuple, list] = {}
    for o in outcomes:
        cells.setdefault(tuple(o.run.cell.items()), []).append(o)
    rows = []
    for cell, runs in cells.items():
        done = [o.summary for o in runs if o.status == "done"]
        row = dict(cell)
        for m in metrics:
            vals = [float(s[m]) for s in done if isinstance(s.get(m), (int, float))]
            n = len(vals)
            mean = sum(vals) / n if n else None
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else (0.0 if n else None)
            row |= {f"{m}_mean": mean, f"{m}_std": std, f"{m}_n": n}
        rows.append(row | {"failed": len(runs) - len(done)})
    return rows


def mean_pm_std(stats: dict, name: str = "", decimals: int = 1, scale: float = 1.0) -> str:
    if stats.get(f"{name}_mean") is None:
        return "-"
    mean = f"{scale * stats[f'{name}_mean']:.{decimals}f}"
    if stats[f"{name}_n"] == 1:
        return mean
    return f"{mean} ± {scale * stats[f'{name}_std']:.{decimals}f} (n={stats[f'{name}_n']})"


def write_frontier(rows: list[dict], out: Path, *, utility: list[str], privacy: list[str]) -> list[Path]:
    return []
