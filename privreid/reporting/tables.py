"""Plain-text / Markdown result tables (R1 / mAP / mINP, seen vs unseen)."""

from __future__ import annotations

from typing import Any

from privreid.evaluation.metric_registry import headline


def comparison_rows(name: str, seen: dict[str, float], unseen: dict[str, float] | None) -> dict[str, Any]:
    """One table row: the model's mean seen-domain and unseen-domain metrics."""
    row: dict[str, Any] = {"model": name}
    for split, metrics in (("seen", seen), ("unseen", unseen or {})):
        for key, label in headline():
            row[f"{split} {label}"] = metrics.get(key)
    return row


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
