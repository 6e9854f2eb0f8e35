"""Audit outputs: ``audit.json`` (one record per model, level, attack and view), ``roc.png``, ``report.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from privreid.io import format_table, save_figure, write_text_atomic
from privreid.auditing.metrics import FPR_TARGETS, auc, fpr_label, roc_curve


def record_label(rec: dict[str, Any]) -> str:
    return f"{rec['model']} | {rec['level']} | {rec['attack']} | {rec['view']}"


def plot_roc(curves: list[tuple[str, np.ndarray, np.ndarray]], path: Path) -> Path:
    """ROC curves on log-log axes with the chance diagonal (Carlini et al., S&P 2022, Fig. 1 style): 10 colours x
    4 line styles, AUC in the legend (best first, beside the axes), the FPR targets as labelled lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = 1e-4
    colours = plt.get_cmap("tab10").colors
    styles = ("-", "--", "-.", ":")
    rocs = []
    for label, labels, scores in curves:
        fpr, tpr, _ = roc_curve(labels, scores)
        rocs.append((auc(fpr, tpr), label, fpr, tpr))
    rocs.sort(key=lambda r: -r[0])
    fig, ax = plt.subplots(figsize=(6.0 + (2.6 if len(rocs) > 1 else 0.0), 5.0))
    for i, (area, label, fpr, tpr) in enumerate(rocs):
        ax.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), label=f"{label} (AUC {area:.3f})", linewidth=1.4,
                color=colours[i % len(colours)], linestyle=styles[(i // len(colours)) % len(styles)])
    ax.plot([floor, 1], [floor, 1], color="grey", linestyle="--", linewidth=0.8, label="chance (AUC 0.500)")
    for f in FPR_TARGETS:
        ax.axvline(f, color="black", linestyle=":", linewidth=0.8)
        ax.text(f * 1.08, 1.5 * floor, f"{fpr_label(f)} FPR", rotation=90, fontsize=7, va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title("membership inference (log-log ROC)")
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return save_figure(fig, path)


def table_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        ci = r.get("ci", {})
        row = {"model": r["model"], "level": r["level"], "attack": r["attack"], "view": r["view"],
               "members": r["members"], "non-members": r["nonmembers"], "AUC": f"{r['auc']:.3f}"}
        if ci:
            row["AUC 95% CI"] = "[{:.3f}, {:.3f}]".format(*ci["auc"])
        for f in FPR_TARGETS:
            key = fpr_label(f)
            flag = "" if r["tpr_at_fpr_achievable"][key] else "*"
            row[f"TPR@{key}"] = f"{100 * r['tpr_at_fpr'][key]:.1f}%{flag}"
        row["bal. acc"] = f"{100 * r['balanced_accuracy']:.1f}%"
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    return format_table(rows)


def write_report(out: Path, records: list[dict[str, Any]], curves: list[tuple[str, np.ndarray, np.ndarray]],
                 dp: list[dict[str, Any]] | None = None) -> list[Path]:
    """Write ``audit.json``, ``roc.png`` (when there are MIA records) and ``report.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "audit.json", json.dumps({"records": records, "dp_audit": dp or []}, indent=2) + "\n")
    files = [out / "audit.json"]
    sections = ["# privreid membership audit"]
    if records:
        files.append(plot_roc(curves, out / "roc.png"))
        sections.append(
            "## Membership inference\n\nTPR at a fixed low FPR (Carlini et al.); `*`: fewer non-members than "
            "1/FPR, so the value is the TPR at zero false positives. Intervals: stratified bootstrap.\n\n"
            + markdown_table(table_rows(records)) + "\n\n![log-log ROC](roc.png)")
    if dp:
        from privreid.auditing.dp_audit import dp_table

        sections.append("## Empirical DP audit (Steinke, Nasr & Jagielski, one run)\n\n" + dp_table(dp))
    write_text_atomic(out / "report.md", "\n\n".join(sections) + "\n")
    files.append(out / "report.md")
    return files
