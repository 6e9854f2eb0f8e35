"""The spread of a cell's metric over seeds: mean, sample standard deviation, n and a Student-t 95% interval.

A cell is one setting of a sweep's grid or one cell of a paper table; its runs differ only in their seed.
:func:`describe` summarises one metric's values; :func:`cell_statistics` groups a sweep's run outcomes by cell and
describes every metric of each.  The interval is the mean's 95% confidence interval under a normal model,
``mean ± t(0.975, n - 1) · s / √n``, given only for n ≥ 3 (with two seeds its half-width is 12.7 standard errors)."""

from __future__ import annotations

import math
from typing import Any

#: the interval's coverage, and the fewest values that get one
CONFIDENCE, MIN_N_INTERVAL = 0.95, 3


def describe(values: list[float], name: str = "") -> dict[str, float | int | None]:
    """``{name}_mean``, ``{name}_std`` (ddof = 1; 0 for one value), ``{name}_n`` and, for n ≥ 3,
    ``{name}_ci95_low`` / ``{name}_ci95_high``; the mean and std are ``None`` without values.  ``name`` empty gives
    the bare keys ``mean``, ``std``, ``n``, ``ci95_low``, ``ci95_high``."""
    key = (lambda k: f"{name}_{k}") if name else (lambda k: k)
    n = len(values)
    out: dict[str, float | int | None] = {key("mean"): None, key("std"): None, key("n"): n}
    if not n:
        return out
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    out |= {key("mean"): mean, key("std"): std}
    if n >= MIN_N_INTERVAL:
        from scipy.stats import t

        half = float(t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * std / math.sqrt(n)
        out |= {key("ci95_low"): mean - half, key("ci95_high"): mean + half}
    return out


def metric_value(summary: dict[str, Any] | None, metric: str) -> float | None:
    """``metric`` of a run's ``summary.json``: a key, or a dotted path into its blocks (``global_seen.mAP``);
    ``None`` where the run has no such number."""
    node: Any = summary
    for part in metric.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def cell_statistics(outcomes: list, metrics: list[str]) -> list[dict]:
    """One row per cell (its grid values, in the order the cells first appear), per metric ``m``:
    ``m_mean``, ``m_std`` (sample std, ddof = 1; 0 for n = 1), ``m_n`` and ``m_ci95_low`` / ``m_ci95_high``
    (Student-t) where n ≥ 3; ``"failed"``: how many of the cell's runs failed (they add to no mean).
    ``outcomes``: :class:`privreid.experiments.executor.RunOutcome`; metrics read by :func:`metric_value`."""
    cells: dict[tuple, list] = {}
    for outcome in outcomes:
        cells.setdefault(tuple(outcome.run.cell.items()), []).append(outcome)
    rows = []
    for cell, runs in cells.items():
        done = [o.summary for o in runs if o.status == "done"]
        row: dict[str, Any] = dict(cell)
        for metric in metrics:
            row |= describe([v for v in (metric_value(s, metric) for s in done) if v is not None], metric)
        rows.append(row | {"failed": len(runs) - len(done)})
    return rows


def mean_pm_std(stats: dict[str, Any], name: str = "", decimals: int = 1, scale: float = 1.0) -> str:
    """A cell as a table prints it: ``"12.3 ± 1.4 (n=3)"``; ``"12.3"`` alone for one value; ``"-"`` for none."""
    key = (lambda k: f"{name}_{k}") if name else (lambda k: k)
    if stats.get(key("mean")) is None:
        return "-"
    mean = f"{scale * stats[key('mean')]:.{decimals}f}"
    if stats[key("n")] == 1:
        return mean
    return f"{mean} ± {scale * stats[key('std')]:.{decimals}f} (n={stats[key('n')]})"
