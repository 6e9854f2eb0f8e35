"""The privacy/utility (and robustness/utility) frontier of a sweep, read at a glance.

For every pair of a utility metric (mAP seen / unseen) and a privacy or robustness measure (ε, inversion PSNR or
feature cosine, membership TPR at 1% FPR, mAP under PGD, a backdoor's ASR), :func:`write_frontier` plots one point
per cell at its mean over seeds with ± one standard deviation as error bars on both axes, labels it by its setting,
and marks the Pareto front (the cells no other cell beats on both axes at once).  A cell with failed runs is drawn
hollow and red with the count in its label; one without a number (every run failed) is named under the axes.
``frontier.csv`` / ``frontier.json`` hold the same points."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from privreid.io import save_figure, write_csv_rows, write_text_atomic

#: the statistics :func:`privreid.experiments.statistics.cell_statistics` writes after a metric's name
_STATISTIC = re.compile(r"_(mean|std|n|ci95_low|ci95_high)$")
#: measures where more is better (utility, robustness: a rank or mAP, also under attack); every other measure
#: (ε, PSNR, SSIM, feature cosine, membership TPR, a backdoor's ASR) is better lower: it leaks or lets in less
_HIGHER_IS_BETTER = re.compile(r"(^|[^a-z])(map|rank\d*|r1|accuracy)($|[^a-z])", re.IGNORECASE)


def higher_is_better(metric: str) -> bool:
    """Whether more of ``metric`` is better (mAP, rank-1, accuracy; also under an attack)."""
    return "asr" not in metric.lower() and bool(_HIGHER_IS_BETTER.search(metric.split(".")[-1]))


def setting(row: dict[str, Any]) -> str:
    """A cell's label: its grid values, ``beta=0.1, method=fedavg`` (the last part of each path)."""
    cell = {k: v for k, v in row.items() if k != "failed" and not _STATISTIC.search(k)}
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in cell.items()) or "default"


def pareto_front(points: list[tuple[float, float]], *, x_higher: bool, y_higher: bool) -> list[bool]:
    """For each point, whether no other point is at least as good on both axes and better on one."""
    sx, sy = (1 if x_higher else -1), (1 if y_higher else -1)

    def dominates(a, b):
        return sx * a[0] >= sx * b[0] and sy * a[1] >= sy * b[1] and a != b

    return [not any(dominates(q, p) for q in points) for p in points]


def frontier_points(rows: list[dict], x: str, y: str) -> list[dict[str, Any]]:
    """One point per cell with a mean of both ``x`` and ``y``, its error bars, whether it is on the Pareto front;
    cells without both means are listed with ``pareto`` None."""
    points = []
    for row in rows:
        point = {"setting": setting(row), "failed": row.get("failed", 0)}
        for axis, metric in (("x", x), ("y", y)):
            point |= {axis: row.get(f"{metric}_mean"), f"{axis}_std": row.get(f"{metric}_std"),
                      f"{axis}_n": row.get(f"{metric}_n", 0)}
        points.append(point)
    drawn = [p for p in points if p["x"] is not None and p["y"] is not None]
    for p, on in zip(drawn, pareto_front([(p["x"], p["y"]) for p in drawn], x_higher=higher_is_better(x),
                                         y_higher=higher_is_better(y))):
        p["pareto"] = on
    return [p | {"pareto": p.get("pareto")} for p in points]


def write_frontier(rows: list[dict], out: Path, *, utility: list[str], privacy: list[str]) -> list[Path]:
    """frontier.csv, frontier.json and one figure per (utility, privacy/robustness) pair with error bars, the
    Pareto front marked, each point labelled by its setting; failed cells marked.  ``rows``:
    :func:`~privreid.experiments.statistics.cell_statistics` rows; a pair no cell measures gets no figure.  Returns
    the files written."""
    out = Path(out)
    pairs, written = [], []
    for u in utility:
        for p in privacy:
            points = frontier_points(rows, p, u)
            if not any(q["x"] is not None and q["y"] is not None for q in points):
                continue
            figure = out / f"frontier-{_slug(u)}-vs-{_slug(p)}.png"
            _plot(points, p, u, figure)
            pairs.append({"utility": u, "privacy": p, "figure": figure.name, "points": points})
            written.append(figure)
    flat = [{"utility": pair["utility"], "privacy": pair["privacy"], **point} for pair in pairs
            for point in pair["points"]]
    if flat:
        written.insert(0, write_csv_rows(flat, out / "frontier.csv"))
    write_text_atomic(out / "frontier.json", json.dumps({"pairs": pairs}, indent=2))
    return [out / "frontier.json", *written]


def _slug(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_")


def _plot(points: list[dict], x: str, y: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [p for p in points if p["pareto"] is not None]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for p in drawn:
        failed = p["failed"] > 0
        ax.errorbar(p["x"], p["y"], xerr=p["x_std"] or 0, yerr=p["y_std"] or 0, fmt="o", capsize=3,
                    color="tab:red" if failed else ("tab:blue" if p["pareto"] else "tab:gray"),
                    mfc="none" if failed else None, ms=7 if p["pareto"] else 5, zorder=3)
        label = p["setting"] + (f" ({p['failed']} failed)" if failed else "")
        ax.annotate(label, (p["x"], p["y"]), textcoords="offset points", xytext=(5, 5), fontsize=7)
    front = sorted((p["x"], p["y"]) for p in drawn if p["pareto"])
    if len(front) > 1:
        ax.plot(*zip(*front), "--", color="tab:blue", lw=1, zorder=2, label="Pareto front")
        ax.legend(fontsize=7, loc="best")
    lost = [p["setting"] for p in points if p["pareto"] is None]
    ax.set_xlabel(f"{x} ({'higher' if higher_is_better(x) else 'lower'} is better)")
    ax.set_ylabel(f"{y} ({'higher' if higher_is_better(y) else 'lower'} is better)")
    n = max((p["x_n"] for p in drawn), default=0)
    ax.set_title(f"{y} against {x}: mean ± std over seeds (n ≤ {n})", fontsize=8)
    if lost:
        fig.text(0.01, 0.01, "no result (every run failed): " + "; ".join(lost), fontsize=6, color="tab:red")
    ax.grid(alpha=0.3)
    save_figure(fig, path)
