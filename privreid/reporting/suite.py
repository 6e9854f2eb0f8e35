"""One report for several checkpoints: clean accuracy, adversarial and corruption robustness, leakage.

``privreid compare --models central.pt fed.pt --suite clean,attacks,corruptions,inversion --out DIR``
runs every selected evaluation on the *same* data for every model (the test
sets of the first checkpoint's configuration, as in
:func:`privreid.comparison.compare_checkpoints`) and writes:

* ``report.md``: the clean table; L2RW+'s Table IX layout (paper 003) for the
  attacks and, in the same layout, for the corruptions (mean (std) over the
  repeats of CIL-ReID's protocol); the inversion summary; and a
  "Deviations" list of every setting that departs from the cited protocols
  (also in ``report.json``, with the settings);
* ``clean.csv``, ``attacks.csv``, ``corruptions.csv``, ``inversion.csv``;
* ``drops.png``: the relative mAP drop per attack and per corruption, one bar
  per model (mean over the test sets);
* ``audit/``: membership inference (:mod:`privreid.auditing`), ``audit.json``,
  ``roc.png``, ``report.md``; its table is in ``report.md``;
* ``inversion/``: per model ``metrics.json`` and ``grid.png`` (subject,
  reconstruction, bilateral-filtered reconstruction, its Laplacian), and
  ``summary.md``;
* ``inversion/aggregate/``: the same subjects under the ``aggregate`` threat
  (what a server under secure aggregation sees: the sum of ``m`` clients'
  shared updates, :mod:`privreid.inversion.aggregate`), per model the
  single-upload reference (``shared-feature``) and the aggregate of ``m``
  (default: each run's clients per round, 1 for a centralised run); a model
  that threat cannot attack (no shared bottleneck) is named with the reason;
* ``inversion.png``: feature cosine and PSNR per model for the single-upload
  threat, the single upload attacked as the aggregate is, and the aggregate.

Every ranking, clean, attacked or corrupted, follows the test set's own
protocol (:func:`privreid.evaluation.model_eval.rank_testset`), so the
"Clean" rows equal ``privreid eval``.  Attacks and corruptions act on
images: a video test set is refused.

Choices: corruptions are reported per *family* by default (noise, blur,
weather, digital: a random type of the family and a random severity per
image, CIL-ReID's protocol restricted to the family) and as the full mix
(``all``); pass names to :class:`SuiteSettings` for single types.  They run
CIL-ReID's settings by default (pixel scale 1, 10 repeats); a scaled pixel
scale or another repeat count is titled "scaled" / states its repeats and
is listed under the deviations.  Inversion attacks each model's first
client on the same subjects.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from privreid.retrieval_attacks.feature_attacks import RETRIEVAL_ATTACKS, default_alpha
from privreid.retrieval_attacks.campaign import attack_models
from privreid.evaluation.metric_registry import headline
from privreid.retrieval_attacks.retrieval import attack_label, format_table_ix, relative_drop

from privreid.config import RunConfig
from privreid.corruptions import resolve_corruptions, resolve_pixel_scale
from privreid.data.catalog import federation_for_config
from privreid.data.types import TestSet
from privreid.errors import ConfigError
from privreid.evaluation.corrupted_eval import (CIL_REID_PIXEL_SCALE, CIL_REID_REPEATS, corruption_deviations,
                                        evaluate_corrupted, is_scaled)
from privreid.device import resolve_device
from privreid.rundir import write_text_atomic
from privreid.reporting.files import save_figure, write_csv_rows
from privreid.reporting.tables import format_table

SUITES = ("clean", "attacks", "corruptions", "inversion", "audit", "poisoning")
TESTSET_CHOICES = ("all", "seen", "unseen")


@dataclass
class SuiteSettings:
    """What the suite runs; defaults follow each subsystem's own defaults, at a CPU-friendly size."""

    suites: list[str] = field(default_factory=lambda: list(SUITES))
    testsets: str = "all"
    attacks: list[str] = field(default_factory=lambda: list(RETRIEVAL_ATTACKS))
    eps: float = 8 / 255
    #: the iterative attacks' step; None: 2.5 eps / steps (privreid.retrieval_attacks.feature_attacks.default_alpha)
    alpha: float | None = None
    steps: int = 10
    target: str = "query"
    max_queries: int | None = None
    corruptions: list[str] = field(default_factory=lambda: ["noise", "blur", "weather", "digital", "all"])
    corruption_repeats: int = CIL_REID_REPEATS
    pixel_scale: float | str = CIL_REID_PIXEL_SCALE
    inversion_subjects: int = 2
    inversion_iterations: int = 200
    inversion_attack: str = "ig"
    inversion_threat: str = "full"
    #: the aggregate threat's m (clients summed); None: each run's clients per round
    inversion_clients: list[int] | None = None
    #: membership audit (privreid.auditing): attacks and the cap on members / non-members per level
    audit_attacks: list[str] = field(default_factory=lambda: ["loss", "feature"])
    audit_max_per_class: int | None = 300
    seed: int = 0

    def validate(self) -> None:
        unknown = [s for s in self.suites if s not in SUITES]
        if unknown or not self.suites:
            raise ConfigError(f"unknown suite(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SUITES)}")
        if self.testsets not in TESTSET_CHOICES:
            raise ConfigError(f"--testsets must be one of {', '.join(TESTSET_CHOICES)}, got {self.testsets!r}")
        for unit in self.corruptions:
            if unit != "all":
                resolve_corruptions(unit)
        if self.corruption_repeats < 1:
            raise ConfigError(f"corruption repeats must be >= 1, got {self.corruption_repeats}")
        resolve_pixel_scale(self.pixel_scale, 2, 2)
        from privreid.inversion.threat_models import get_threat

        if not get_threat(self.inversion_threat).single_upload:
            raise ConfigError("the suite's inversion always includes the aggregate threat (--clients m); "
                              "--threat picks the single-upload threat next to it")
        if self.inversion_clients is not None:
            from privreid.inversion.aggregate import parse_clients

            self.inversion_clients = parse_clients([str(m) for m in self.inversion_clients])
        if self.inversion_subjects < 1:
            raise ConfigError(f"inversion subjects must be >= 1, got {self.inversion_subjects}")


def _testsets(cfg: RunConfig, settings: SuiteSettings) -> list[TestSet]:
    fed = federation_for_config(cfg)
    which = settings.testsets
    sets = {"seen": fed.seen, "unseen": fed.unseen, "all": fed.seen + fed.unseen}[which]
    if not sets:
        raise ConfigError(f"the test data has no {which} test sets")
    video = [ts.name for ts in sets if ts.tracklets is not None]
    image_suites = [s for s in ("attacks", "corruptions", "poisoning") if s in settings.suites]
    if video and image_suites:
        raise ConfigError(f"the {' and '.join(image_suites)} suite(s) act on images; {', '.join(video)} hold(s) "
                          "video tracklets (run --suite clean,inversion on video data)")
    return sets


def suite_deviations(settings: SuiteSettings) -> list[str]:
    """The settings of ``settings`` that depart from the protocols the report cites (one line each)."""
    if "corruptions" not in settings.suites:
        return []
    return corruption_deviations(settings.pixel_scale, settings.corruption_repeats)


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


def _corruption_record(model: str, testset: str, unit: str, result: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model, "testset": testset, "corruption": unit,
                           "repeats": len(result["repeats"])}
    for key, _ in headline():
        row[f"clean_{key}"] = result["clean"][key]
        row[key] = result["mean"][key]
        row[f"std_{key}"] = result["std"][key]
        row[f"drop_{key}"] = relative_drop(result["clean"][key], result["mean"][key])
    return row


def _as_table_ix(records: list[dict[str, Any]]) -> str:
    """Corruption records in Table IX's layout, cells as ``mean (std)`` in %."""
    shown = []
    for r in records:
        row = {**r, "attack": r["corruption"]}
        for key, _ in headline():
            row[key] = f"{100 * r[key]:.1f} ({100 * r[f'std_{key}']:.1f})"
        shown.append(row)
    return format_table_ix(shown)


def plot_drops(attack_rows: list[dict], corruption_rows: list[dict], path: Path) -> Path:
    """Bar chart of the relative mAP drop (%) per attack and per corruption, one bar per model.

    Readable at a glance: each bar is the mean over the test sets with its number written on it, and a ± std
    error bar only where there are several test sets (one test set has no spread to draw); bars start at 0 (the
    axis always holds 0, so two close bars look close); the legend sits beside the bars, not over them.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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


def run_suite(paths: list[str | os.PathLike], out: str | os.PathLike, settings: SuiteSettings | None = None, *,
              device: str = "auto", progress: bool = False, data: list[str] | None = None,
              models: list | None = None, **file_options: Any) -> dict[str, Any]:
    """Run the selected evaluations on every model and write the report into ``out`` (see module docstring).

    ``paths``: privreid checkpoints or model files from elsewhere
    (:mod:`privreid.models.evaluated`; ``file_options`` say how to read the
    latter, ``models`` if already loaded), on the test sets of ``data`` or of
    the first checkpoint.  The inversion and audit suites need privreid
    checkpoints (a client's update, its training data); the attacks suite
    needs gradients.

    Returns ``{"clean": rows, "attacks": records, "corruptions": records,
    "inversion": {...}, "deviations": [...], "files": [...]}`` (absent
    suites are empty).
    """
    from privreid.comparison import compare_checkpoints
    from privreid.models.evaluated import data_source, load_evaluated_models, model_labels

    settings = settings or SuiteSettings()
    settings.validate()
    if not paths:
        raise ConfigError("give at least one checkpoint")
    paths = [Path(p) for p in paths]
    models = models or load_evaluated_models(paths, **file_options)
    instead = "the clean, attacks and corruptions suites take any model"
    for suite in ("inversion", "audit"):
        if suite in settings.suites:
            for model in models:
                model.require("checkpoint", f"the {suite} suite", instead)
    if "attacks" in settings.suites:
        for model in models:
            model.require("gradients", "the attacks suite", "the clean and corruptions suites need no gradients")
    labels = model_labels(models)
    source = data_source(models, data)
    dev = resolve_device(device)
    testsets = _testsets(source.config, settings)
    backdoors = []  # (model label, the trigger its run trained with), resolved before anything is written
    if "poisoning" in settings.suites:
        from privreid.malicious_clients.backdoor import recorded_backdoor

        recorded = [(label, recorded_backdoor(m.checkpoint.run_config)) for label, m in zip(labels, models)
                    if m.checkpoint is not None]
        backdoors = [(label, b) for label, b in recorded if b is not None]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"clean": [], "attacks": [], "corruptions": [], "inversion": {}, "audit": [],
                              "poisoning": [], "deviations": [],
                              "files": []}
    sections = [f"# privreid report\n\nModels: {', '.join(f'`{p}`' for p in paths)}. "
                f"Test sets: {', '.join(t.name for t in testsets)} "
                f"({'from --data' if data else 'from the first checkpoint' + chr(39) + 's data'})."]

    def evaluated_models():
        for label, model in zip(labels, models):
            if model.checkpoint is not None and not model.checkpoint.has_global_model:
                raise ConfigError(f"{label}: method {model.checkpoint.method!r} has no global model; the suite "
                                  "compares global models (use privreid attack/invert --client for standalone runs)")
            yield label, model.network(device=dev), model.input_size

    if "clean" in settings.suites:
        rows = compare_checkpoints(paths, device=device, data=data, models=models)
        result["clean"] = rows
        write_csv_rows(rows, out / "clean.csv")
        sections.append("## Clean retrieval (R1 / mAP / mINP, %)\n\n" + format_table(rows))

    if "attacks" in settings.suites or "corruptions" in settings.suites:
        for label, model, (height, width) in evaluated_models():
            size = dict(height=height, width=width, device=dev)
            for ts in testsets:
                if "attacks" in settings.suites:
                    records, _ = attack_models([(label, model, height, width)], [ts],
                                               methods=settings.attacks, eps=settings.eps, alpha=settings.alpha,
                                               steps=settings.steps, target=settings.target, device=dev,
                                               max_queries=settings.max_queries, seed=settings.seed,
                                               progress=progress, record_labels=("model", "testset"))
                    result["attacks"] += records
                if "corruptions" in settings.suites:
                    for unit in settings.corruptions:
                        res = evaluate_corrupted(model, ts, corruptions=unit, severity="random", corrupt="both",
                                                 repeats=settings.corruption_repeats, seed=settings.seed,
                                                 pixel_scale=settings.pixel_scale, progress=progress, **size)
                        result["corruptions"].append(_corruption_record(label, ts.name, unit, res))
            del model
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
        from privreid.inversion import InversionSettings
        from privreid.inversion.campaign import invert_checkpoints

        from privreid.inversion.aggregate import invert_aggregate

        inversion = InversionSettings(attack=settings.inversion_attack, iterations=settings.inversion_iterations)
        inv = invert_checkpoints(paths, out / "inversion", n=settings.inversion_subjects,
                                 threat=settings.inversion_threat, seed=settings.seed, device=str(dev),
                                 progress=progress, settings=inversion)
        agg = invert_aggregate(paths, out / "inversion" / "aggregate", n=settings.inversion_subjects,
                               clients=settings.inversion_clients, seed=settings.seed, device=str(dev),
                               progress=progress, skip_refused=True, settings=inversion)
        result["inversion"] = {"table": inv.table, "models": inv.models,
                               "aggregate": {"table": agg.table, "models": agg.models}}
        write_csv_rows(inversion_records(settings.inversion_threat, inv.models, agg.models, inversion.describe()),
                       out / "inversion.csv")
        plot_inversion(settings.inversion_threat, inv.models, agg.models, out / "inversion.png")
        grids = "\n".join(f"![{m['name']}]({Path(m['grid']).relative_to(out).as_posix()})" for m in inv.models)
        agg_grids = "\n".join(f"![{m['name']}: {m['row']}]({Path(m['grid']).relative_to(out).as_posix()})"
                             for m in agg.models if "grid" in m)
        sections.append(f"## Gradient inversion (what one upload reveals)\n\n{inv.table}\n{grids}")
        sections.append("## Gradient inversion under secure aggregation (what the sum of m uploads reveals)\n\n"
                        f"{agg.table}\n{agg_grids}\n\n![leakage per threat](inversion.png)")

    if "audit" in settings.suites:
        from privreid.auditing import AuditSettings, run_audit
        from privreid.auditing.report import markdown_table, table_rows

        audit = run_audit(paths, out / "audit", AuditSettings(attacks=settings.audit_attacks, seed=settings.seed,
                                                              max_per_class=settings.audit_max_per_class), device=device)
        result["audit"] = audit["records"]
        sections.append("## Membership inference (privreid audit: image and identity level, released model)\n\n"
                        + markdown_table(table_rows(audit["records"])) + "\n\n![log-log ROC](audit/roc.png)")

    if "poisoning" in settings.suites:
        from privreid.evaluation.backdoor import backdoor_records

        title = ("## Backdoors (each recorded trigger on every query; ASR: rank-1 is the target, over the queries "
                 "of other identities)\n\n")
        if backdoors:
            result["poisoning"] = backdoor_records(list(evaluated_models()), backdoors, testsets, device=dev,
                                                   progress=progress)
            write_csv_rows(result["poisoning"], out / "poisoning.csv")
            sections.append(title + "\n".join(f"- {label}: {b.describe()}" for label, b in backdoors) + "\n\n"
                            + format_table(result["poisoning"]))
        else:
            sections.append(title + "No model's run trained with a backdoor (--adversary backdoor or dba).")

    result["deviations"] = suite_deviations(settings)
    sections.append("## Deviations\n\n" + ("\n".join(f"- {line}" for line in result["deviations"])
                                            or "None: every section follows the protocol it cites."))
    write_text_atomic(out / "report.md", "\n\n".join(sections) + "\n")
    write_text_atomic(out / "report.json", json.dumps(
        {"checkpoints": [str(p) for p in paths], "models": [m.provenance() for m in models],
         "settings": asdict(settings), "deviations": result["deviations"]},
        indent=2))
    result["files"] = sorted(str(p) for p in out.iterdir() if p.is_file())
    return result
