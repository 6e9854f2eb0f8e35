"""One report for several checkpoints: clean accuracy, adversarial and corruption robustness, leakage.

``privreid compare --models central.pt fed.pt --suite clean,attacks,corruptions,inversion --out DIR`` runs every
selected evaluation on the *same* data for every model (the test sets of the first checkpoint's configuration, as in
:func:`privreid.comparison.compare_checkpoints`; :func:`privreid.comparison.run_suites`) and writes
(:func:`write_report`):

* ``report.md``: the clean table; L2RW+'s Table IX layout (paper 003) for the attacks and, in the same layout, for the
  corruptions (mean (std) over the repeats of CIL-ReID's protocol); the inversion summary; and a "Deviations" list of
  every setting that departs from the cited protocols (also in ``report.json``, with the settings);
* ``clean.csv``, ``attacks.csv``, ``corruptions.csv``, ``inversion.csv``;
* ``drops.png``: the relative mAP drop per attack and per corruption, one bar per model (mean over the test sets);
* ``poisoning.csv``, ``poisoning_rounds.csv`` and ``poisoning_asr.png``: each recorded trigger on every model, and
  each backdoor run's ASR per evaluated round as recorded during training;
* ``audit/``: membership inference (:mod:`privreid.auditing`), ``audit.json``, ``roc.png``, ``report.md``; its table
  is in ``report.md``;
* ``inversion/``: per model ``metrics.json`` and ``grid.png`` (subject, reconstruction, bilateral-filtered
  reconstruction, its Laplacian), and ``summary.md``;
* ``inversion/aggregate/``: the same subjects under the ``aggregate`` threat (what a server under secure aggregation
  sees: the sum of ``m`` clients' shared updates, :mod:`privreid.inversion.aggregate`), per model the single-upload
  reference (``shared-feature``) and the aggregate of ``m`` (default: each run's clients per round, 1 for a
  centralised run); a model that threat cannot attack (no shared bottleneck) is named with the reason;
* ``inversion.png``: feature cosine and PSNR per model for the single-upload threat, the single upload attacked as the
  aggregate is, and the aggregate.

Every ranking, clean, attacked or corrupted, follows the test set's own protocol
(:func:`privreid.evaluation.model_eval.rank_testset`), so the "Clean" rows equal ``privreid eval``.  Attacks and
corruptions act on images: a video test set is refused.

Choices: corruptions are reported per *family* by default (noise, blur, weather, digital: a random type of the family
and a random severity per image, CIL-ReID's protocol restricted to the family) and as the full mix (``all``); pass
names to :class:`privreid.comparison.SuiteSettings` for single types.  They run CIL-ReID's settings by default (pixel
scale 1, 10 repeats); another pixel scale or repeat count is titled "scaled" / states its repeats and is listed under
the deviations.  Inversion attacks each model's first client on the same subjects.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from privreid.comparison import SuiteRun, SuiteSettings, suite_deviations
from privreid.evaluation.corrupted_eval import CIL_REID_REPEATS, is_scaled
from privreid.io import format_table, pyplot, save_figure, write_csv_rows, write_text_atomic
from privreid.retrieval_attacks.feature_attacks import default_alpha
from privreid.evaluation.metric_registry import headline
from privreid.retrieval_attacks.retrieval import attack_label, format_table_ix


def _corruption_title(settings: SuiteSettings) -> str:
    scale = settings.pixel_scale
    if is_scaled(scale):
        what = (f"CIL-ReID corruptions, scaled (pixel scale {'sqrt(H*W)/224' if scale == 'auto' else scale}; "
                "CIL-ReID: 1)")
    else:
        what = "CIL-ReID protocol"
    repeats = settings.corruption_repeats
    note = "" if repeats == CIL_REID_REPEATS else f" (CIL-ReID: {CIL_REID_REPEATS})"
    return (f"## Corruptions ({what}: random type and severity per image, query and gallery, "
            f"mean (std) over {repeats} repeats{note})")


def _as_table_ix(records: list[dict[str, Any]]) -> str:
    """Corruption records in Table IX's layout, cells as ``mean (std)`` in %."""
    shown = []
    for r in records:
        row = {**r, "attack": r["corruption"]}
        for key, _ in headline():
            row[key] = f"{100 * r[key]:.1f} ({100 * r[f'std_{key}']:.1f})"
        shown.append(row)
    return format_table_ix(shown)


def plot_asr_rounds(rows: list[dict], path: Path) -> Path:
    """The ASR (%) per evaluated round of each backdoor run (``poisoning_rounds`` records), one line per run and
    test set: solid on the whole gallery, dashed on the gallery without the attacker's images of the target.

    Readable at a glance: the y axis is 0 to 100 whatever the values, each point marked, the legend beside the
    lines; an evasion run (no ASR) draws nothing."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    runs = list(dict.fromkeys((r["run"], r["testset"]) for r in rows if r["asr"] is not None))
    for i, (run, testset) in enumerate(runs):
        points = [r for r in rows if (r["run"], r["testset"]) == (run, testset)]
        color = plt.get_cmap("tab10").colors[i % 10]
        ax.plot([r["round"] for r in points], [100 * r["asr"] for r in points], "o-", color=color,
                label=f"{run} ({testset})")
        clean = [r for r in points if r["asr_clean_gallery"] is not None]
        if clean:
            ax.plot([r["round"] for r in clean], [100 * r["asr_clean_gallery"] for r in clean], "o--", color=color,
                    label=f"{run} ({testset}), clean gallery")
    ax.set_ylim(0, 100)
    ax.set_xlabel("round")
    ax.set_ylabel("ASR (%, target at rank 1)")
    if runs:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return save_figure(fig, path, title="Backdoor success per round")


def plot_drops(attack_rows: list[dict], corruption_rows: list[dict], path: Path) -> Path:
    """Bar chart of the relative mAP drop (%) per attack and per corruption, one bar per model.

    Readable at a glance: each bar is the mean over the test sets with its number written on it, and a ± std
    error bar only where there are several test sets (one test set has no spread to draw); bars start at 0 (the
    axis always holds 0, so two close bars look close); the legend sits beside the bars, not over them.
    """
    plt = pyplot()
    panels = [(title, rows, key) for title, rows, key in
              (("adversarial attacks", attack_rows, "attack"), ("corruptions", corruption_rows, "corruption")) if rows]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    models = list(dict.fromkeys(r["model"] for _, rows, _ in panels for r in rows))
    width = 0.8 / len(models)
    for ax, (title, rows, key) in zip(axes[0], panels):
        units = list(dict.fromkeys(r[key] for r in rows))
        spans, several = [], False
        for i, model in enumerate(models):
            drops = [[100 * r["drop_mAP"] for r in rows if r["model"] == model and r[key] == unit
                      and r["drop_mAP"] is not None] for unit in units]
            means = np.array([np.mean(d) if d else np.nan for d in drops])
            stds = np.array([np.std(d) if len(d) > 1 else np.nan for d in drops])  # no spread over one test set
            spread = bool(np.isfinite(stds).any())
            bars = ax.bar(np.arange(len(units)) + i * width - 0.4 + width / 2, means, width,
                          yerr=np.nan_to_num(stds) if spread else None, capsize=3 if spread else 0,
                          label=model, color=plt.get_cmap("tab10").colors[i % 10])
            ax.bar_label(bars, labels=[f"{m:.1f}" + (f"±{sd:.1f}" if np.isfinite(sd) else "") if np.isfinite(m)
                                       else "" for m, sd in zip(means, stds)], fontsize=7, padding=2)
            several |= spread
            spans += [v for v in (*(means - np.nan_to_num(stds)), *(means + np.nan_to_num(stds))) if np.isfinite(v)]
        low, high = min([0.0, *spans]), max([0.0, *spans])  # bars from 0
        margin = max(0.1 * (high - low), 1.0)
        ax.set_ylim(low - (margin if low < 0 else 0.0), high + 1.5 * margin)  # room for the numbers on the bars
        ax.set_xticks(np.arange(len(units)), [attack_label(u) for u in units], rotation=30)
        ax.set_ylabel("relative mAP drop (%)" + (", mean ± std over test sets" if several else ""))
        ax.set_title(title)
        ax.axhline(0, color="black", linewidth=0.6)
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return save_figure(fig, path)


def inversion_records(threat: str, single: list[dict], aggregate: list[dict],
                      recipe: str | None = None) -> list[dict[str, Any]]:
    """``inversion.csv``: one row per (model, threat, m) with the attack's and the random baseline's mean metrics,
    and ``recipe``, the attack and budget that produced them (:meth:`InversionSettings.describe`)."""
    from privreid.inversion.report import METRICS

    rows = []
    for threat_name, clients, m in ([(threat, None, m) for m in single]
                                    + [("shared-feature" if a["clients"] is None else "aggregate", a["clients"], a)
                                       for a in aggregate if "summary" in a]):
        row = {"model": m["name"], "threat": threat_name, "clients": clients}
        for key in ("attack", "random"):
            row.update({(metric if key == "attack" else f"random_{metric}"): m["summary"][key][metric]["mean"]
                        for metric in METRICS})
        if recipe is not None:
            row["attack"] = recipe
        rows.append(row)
    return rows


def plot_inversion(threat: str, single: list[dict], aggregate: list[dict], path: Path) -> Path:
    """Feature cosine and PSNR (mean ± std) per model: the single-upload threat, its shared-feature reference
    and the aggregate rows; the random-image baseline as a black tick."""
    plt = pyplot()
    # bars: the single-upload threat, its shared-feature reference, then the k-th aggregate row of each model
    # (with each run's own m, the k-th rows of two models may sum different numbers of clients: the tick says m)
    summaries: dict[tuple[str, str], dict] = {(m["name"], threat): m["summary"] for m in single}
    sizes: dict[str, list[int]] = {}
    for a in aggregate:
        if "summary" not in a:
            continue
        if a["clients"] is None:
            summaries[(a["name"], "shared-feature")] = a["summary"]
        else:
            sizes.setdefault(a["name"], []).append(a["clients"])
            summaries[(a["name"], f"aggregate #{len(sizes[a['name']])}")] = a["summary"]
    models = list(dict.fromkeys(k[0] for k in summaries))
    kinds = list(dict.fromkeys(k[1] for k in summaries))

    def kind_label(kind: str) -> str:
        if not kind.startswith("aggregate #"):
            return f"one upload, {kind}"
        k = int(kind.split("#")[1]) - 1
        ms = {sizes[m][k] for m in models if len(sizes.get(m, [])) > k}
        return f"aggregate of {ms.pop()}" if len(ms) == 1 else "aggregate of m (the run's clients per round)"

    ticks = [f"{model}\n(m = {', '.join(map(str, sizes[model]))})" if model in sizes else model for model in models]
    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 2.2 * len(models)) * 2, 3.8), squeeze=False)
    width = 0.8 / max(len(kinds), 1)
    for ax, metric, label in zip(axes[0], ("feature_cosine", "psnr"), ("feature cosine", "PSNR (dB)")):
        for i, kind in enumerate(kinds):
            got = [summaries.get((model, kind)) for model in models]
            means = [s["attack"][metric]["mean"] if s else np.nan for s in got]
            stds = [s["attack"][metric]["std"] if s else 0.0 for s in got]
            randoms = [s["random"][metric]["mean"] if s else np.nan for s in got]
            counts = [s.get("subjects", 0) if s else 0 for s in got]
            spread = [sd if n > 1 else 0.0 for sd, n in zip(stds, counts)]  # no error bar over one subject
            x = np.arange(len(models)) + i * width - 0.4 + width / 2
            ax.bar(x, means, width, yerr=spread if any(spread) else None, capsize=3, label=kind_label(kind))
            ax.scatter(x, randoms, marker="_", color="black", s=200, zorder=3,
                       label="a random image (baseline)" if i == 0 else None)
        ax.set_xticks(np.arange(len(models)), ticks, fontsize=8)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))  # bars from 0
        ax.set_title(f"{label}: reconstruction (bars), random image (black tick)", fontsize=9)
    # beside the data, never over the bars
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return save_figure(fig, path, title="Gradient inversion: one upload vs the sum of m uploads")


def write_report(run: SuiteRun, out: str | Path, settings: SuiteSettings, *, data: list[str] | None = None
                 ) -> dict[str, Any]:
    """Write the report of ``run`` into ``out`` (see module docstring; ``data``: the ``--data`` the test sets came
    from, else the first checkpoint's).

    Returns ``run.result`` with ``"deviations"`` and ``"files"`` (absent suites are empty).
    """
    out, result = Path(out), run.result
    sections = [f"# privreid report\n\nModels: {', '.join(f'`{p}`' for p in run.paths)}. "
                f"Test sets: {', '.join(t.name for t in run.testsets)} "
                f"({'from --data' if data else 'from the first checkpoint' + chr(39) + 's data'})."]
    if "clean" in settings.suites:
        write_csv_rows(result["clean"], out / "clean.csv")
        sections.append("## Clean retrieval (R1 / mAP / mINP, %)\n\n" + format_table(result["clean"]))
    if result["attacks"]:
        write_csv_rows(result["attacks"], out / "attacks.csv")
        step = default_alpha(settings.eps, settings.steps) if settings.alpha is None else settings.alpha
        sections.append(f"## Adversarial queries (L2RW+ Table IX layout; eps {settings.eps * 255:.3g}/255, "
                        f"{settings.steps} steps of {step * 255:.3g}/255, target {settings.target})\n\n"
                        + format_table_ix(result["attacks"]))
    if result["corruptions"]:
        write_csv_rows(result["corruptions"], out / "corruptions.csv")
        sections.append(f"{_corruption_title(settings)}\n\n" + _as_table_ix(result["corruptions"]))
    if result["attacks"] or result["corruptions"]:
        plot_drops(result["attacks"], result["corruptions"], out / "drops.png")
        sections.append("![relative mAP drop per attack and corruption](drops.png)")
    if "inversion" in settings.suites:
        inv, agg = result["inversion"], result["inversion"]["aggregate"]
        write_csv_rows(inversion_records(settings.inversion_threat, inv["models"], agg["models"], run.recipe),
                       out / "inversion.csv")
        plot_inversion(settings.inversion_threat, inv["models"], agg["models"], out / "inversion.png")
        grids = "\n".join(f"![{m['name']}]({Path(m['grid']).relative_to(out).as_posix()})" for m in inv["models"])
        agg_grids = "\n".join(f"![{m['name']}: {m['row']}]({Path(m['grid']).relative_to(out).as_posix()})"
                              for m in agg["models"] if "grid" in m)
        sections.append(f"## Gradient inversion (what one upload reveals)\n\n{inv['table']}\n{grids}")
        sections.append("## Gradient inversion under secure aggregation (what the sum of m uploads reveals)\n\n"
                        f"{agg['table']}\n{agg_grids}\n\n![leakage per threat](inversion.png)")
    if "audit" in settings.suites:
        from privreid.auditing.report import markdown_table, table_rows

        sections.append("## Membership inference (privreid audit: image and identity level, released model)\n\n"
                        + markdown_table(table_rows(result["audit"])) + "\n\n![log-log ROC](audit/roc.png)")
    if "poisoning" in settings.suites:
        title = ("## Backdoors (each recorded trigger on every query; ASR / ASR@k: a target image at rank 1 / within "
                 "rank k, over the queries of other identities, on the whole gallery; tmAP: their mAP with the "
                 "target as the only match; ASR clean gallery: rank 1 on the gallery without the attacker's own "
                 "images of the target)\n\n")
        if run.backdoors:
            write_csv_rows(result["poisoning"], out / "poisoning.csv")
            sections.append(title + "\n".join(f"- {label}: {b.describe()}" for label, b in run.backdoors) + "\n\n"
                            + format_table(result["poisoning"]))
            if result["poisoning_rounds"]:
                write_csv_rows(result["poisoning_rounds"], out / "poisoning_rounds.csv")
                plot_asr_rounds(result["poisoning_rounds"], out / "poisoning_asr.png")
                sections.append("![ASR per evaluated round of each backdoor run, recorded during training on the "
                                "global model](poisoning_asr.png)")
        else:
            sections.append(title + "No model's run trained with a backdoor (--adversary backdoor or dba).")
    result["deviations"] = suite_deviations(settings)
    sections.append("## Deviations\n\n" + ("\n".join(f"- {line}" for line in result["deviations"])
                                            or "None: every section follows the protocol it cites."))
    write_text_atomic(out / "report.md", "\n\n".join(sections) + "\n")
    write_text_atomic(out / "report.json", json.dumps(
        {"checkpoints": [str(p) for p in run.paths], "models": [m.provenance() for m in run.models],
         "settings": asdict(settings), "deviations": result["deviations"]},
        indent=2))
    result["files"] = sorted(str(p) for p in out.iterdir() if p.is_file())
    return result
