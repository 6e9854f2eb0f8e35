"""Sweeps: a grid of configuration values x seeds, one run each, then utility, leakage and their spread.

This extends paper 002's Fig. 3 (FedReID's utility as its white-noise scale beta grows) to any grid: ``--grid
PATH=V1,V2`` names any configuration field as ``--set`` does (``privacy.beta``, ``federation.method``,
``robustness.defenses.robust-median``), the cross product of the grids x ``--seeds`` is the set of runs
(:func:`plan_sweep`), a YAML sweep file says the same (:func:`sweep_file_grids`), and ``--param/--values`` (a privacy
knob) is one grid.  Runs live in ``OUT/<label>=<value>[,...][,seed=S]/`` (``seed=S`` only with ``--seeds``), plus a
non-private ``OUT/reference`` (per seed) when some run's non-private counterpart is not in the grid.  The runs are
trained by :func:`privreid.experiments.executor.execute` (local or Ray Tune; resumable; failures retried, then
marked).  Measured for every finished run, on the same data:

* utility: the final global R1 / mAP on the seen and unseen domains (``summary.json``), and the accounted epsilon
  (``None`` for beta alone, which has no formal guarantee);
* leakage through the uploads: gradient inversion (:mod:`privreid.inversion`) on the same subjects for every run,
  PSNR and feature cosine, with the random-image baseline;
* adversarial robustness: mAP under PGD (:mod:`privreid.retrieval_attacks.retrieval`) on the first seen test set;
* membership leakage of the released model: TPR at 1% FPR of the ``loss`` attack at the image and the identity level
  (:mod:`privreid.auditing`; capped at ``mia_max_per_class`` members and non-members).

Each run's measurements are cached in ``OUT/<run>/sweep_eval.json`` (recomputed when the measurement settings
change).  Writes ``OUT/sweep_runs.csv`` (one row per run), ``OUT/sweep.csv`` (one row per cell: mean, std, n and, for
n >= 3, the 95% interval over seeds), the frontier (``frontier.csv``/``.json`` and figures) and, for one numeric
grid, ``OUT/sweep.png`` with error bars.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from privreid.config import RunConfig
from privreid.config.sets import apply_sets
from privreid.config.values import parse_json
from privreid.errors import ConfigError
from privreid.experiments.executor import ExecutorSettings, PlannedRun, execute
from privreid.experiments.frontier import write_frontier
from privreid.experiments.statistics import cell_statistics, mean_pm_std
from privreid.io import format_table, save_figure, write_csv_rows, write_text_atomic

#: CLI knob name -> PrivacyConfig field
KNOBS = {"beta": "beta", "noise-multiplier": "noise_multiplier", "target-epsilon": "target_epsilon", "clip": "clip"}
REFERENCE = "reference"
UTILITY = ["seen mAP", "unseen mAP"]
#: the privacy and robustness measures the frontier plots utility against (those a sweep has)
PRIVACY = ["epsilon", "inversion PSNR", "inversion cosine", "MIA TPR@1% image", "MIA TPR@1% identity", "PGD mAP"]


@dataclass
class LeakageSettings:
    """How each run's leakage and robustness are measured (the same for every run of a sweep)."""

    enabled: bool = True
    subjects: int = 2
    iterations: int = 100
    attack: str = "ig"
    threat: str = "full"
    pgd_eps: float = 8 / 255
    pgd_steps: int = 10
    max_queries: int | None = 100
    mia_max_per_class: int | None = 300
    seed: int = 0


@dataclass(frozen=True)
class Grid:
    """One axis of a sweep: a configuration field (``--set``'s path), its values, the label its run names use."""

    path: str
    values: list[Any]
    label: str


def knob_config(base: RunConfig, param: str, value: float) -> RunConfig:
    """``base`` with the knob set to ``value``; raises ConfigError when the knob has no effect in ``base``."""
    path = knob_grid(param, [value]).path
    t = base.privacy
    if param in ("noise-multiplier", "target-epsilon") and not (t.dp_sgd or t.client_dp):
        raise ConfigError(f"--param {param} needs --dp-sgd or --client-dp among the train options")
    if param == "clip" and not t.client_dp:
        raise ConfigError("--param clip needs --client-dp among the train options")
    return base.with_values({path: value}).validate()


def reference_config(base: RunConfig) -> RunConfig:
    """The non-private run: ``base`` without beta noise, DP-SGD or client-level DP."""
    return dataclasses.replace(base, privacy=dataclasses.replace(
        base.privacy, beta=0.0, dp_sgd=False, client_dp=False, noise_multiplier=None, max_grad_norm=None, clip=None,
        target_epsilon=None, delta=None))


def parse_values(text: str) -> list[float]:
    """``"0,0.01,0.1"`` -> ``[0.0, 0.01, 0.1]`` (distinct, finite numbers)."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--values must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ConfigError("--values is empty")
    if len(set(values)) != len(values):
        raise ConfigError(f"--values has repeats: {text!r}")
    return values


def knob_grid(param: str, values: list[float]) -> Grid:
    """The old ``--param/--values`` as one grid (its runs keep their names, ``beta=0.01``)."""
    if param not in KNOBS:
        raise ConfigError(f"unknown --param {param!r}; choose from {', '.join(KNOBS)}")
    return Grid(f"privacy.{KNOBS[param]}", values, param)


def _split_top_level(text: str) -> list[str]:
    """``"1,[2,3],{}"`` -> ``["1", "[2,3]", "{}"]``: commas inside brackets, braces or quotes do not split."""
    parts, depth, quote, current = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += ch
    return [p for p in [*parts, current.strip()] if p]


def parse_grid(text: str, option: str = "--grid") -> Grid:
    """``"privacy.beta=0,0.1"`` -> a :class:`Grid` (values as JSON where they parse, else strings)."""
    path, sep, raw = text.partition("=")
    values = [parse_json(v) for v in _split_top_level(raw)]
    if not sep or "." not in path or not values:
        raise ConfigError(f"{option} expects SECTION.FIELD=V1,V2,..., e.g. privacy.beta=0,0.1 (got {text!r})")
    if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
        raise ConfigError(f"{option} {path.strip()}: repeated values in {raw!r}")
    return Grid(path.strip(), values, path.strip().split(".")[-1])


def parse_seeds(text: str | None) -> list[int] | None:
    """``"0,1,2"`` -> ``[0, 1, 2]`` (distinct integers >= 0); ``None`` stays ``None`` (the config's seed)."""
    if text is None:
        return None
    try:
        seeds = [int(v) for v in _split_top_level(text)]
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"--seeds must be distinct integers >= 0, got {text!r}")
    return seeds


def sweep_file_grids(data: Any, name: str) -> tuple[list[Grid], list[int] | None]:
    """A sweep file's grids and seeds (its YAML read by the command): ``grid: {PATH: [V1, V2], ...}`` and
    optionally ``seeds: [0, 1, 2]``."""
    if not isinstance(data, dict) or not isinstance(data.get("grid"), dict) or set(data) - {"grid", "seeds"}:
        raise ConfigError(f"--sweep-file {name}: expected a mapping with grid: {{PATH: [values]}} and seeds: [...]")
    grids = []
    for key, values in data["grid"].items():
        values = values if isinstance(values, list) else [values]
        grids.append(parse_grid(f"{key}=" + ",".join(v if isinstance(v, str) else json.dumps(v) for v in values),
                                f"--sweep-file {name}: grid"))
    seeds = data.get("seeds")
    return grids, None if seeds is None else parse_seeds(",".join(str(s) for s in
                                                                  (seeds if isinstance(seeds, list) else [seeds])))


def sweep_arguments(grid: list[str], seeds: str | None, sweep_file: tuple[Any, str] | None, param: str | None,
                    values: str | None) -> tuple[list[Grid], list[int] | None]:
    """``privreid sweep``'s grids and seeds from ``--grid``/``--seeds``, ``--sweep-file`` (its data and name) or
    ``--param/--values``."""
    if (param is None) != (values is None):
        raise ConfigError("--param and --values go together")
    if sum(bool(x) for x in (grid, sweep_file is not None, param is not None)) != 1:
        raise ConfigError("give the grid once: --grid PATH=V1,V2 (repeatable), --sweep-file FILE or "
                          "--param KNOB --values V1,V2")
    if sweep_file is not None:
        if seeds is not None:
            raise ConfigError("--sweep-file gives the seeds (seeds: [...]); drop --seeds")
        return sweep_file_grids(*sweep_file)
    if param is not None:
        return [knob_grid(param, parse_values(values))], parse_seeds(seeds)
    return [parse_grid(g) for g in grid], parse_seeds(seeds)


def _text(value: Any) -> str:
    """A grid value in a run's name, filesystem-safe: numbers as ``%g``; a mapping as its ``key=value`` pairs
    joined by ``+`` (``{"f": 1, "keep": 7}``: ``f=1+keep=7``; ``{}``, a defense at its defaults: ``on``); a list
    as its items joined by ``+``."""
    if isinstance(value, dict):
        text = "+".join(f"{k}={_text(v)}" for k, v in value.items()) or "on"
    elif isinstance(value, list):
        text = "+".join(_text(v) for v in value) or "none"
    else:
        text = f"{value:g}" if isinstance(value, float) else str(value).lower() if isinstance(value, bool) else \
            str(value)
    return re.sub(r"[^\w.+\-=@]", "_", text)


def plan_sweep(base: RunConfig, grids: list[Grid], seeds: list[int] | None, *,
               knob: str | None = None) -> list[PlannedRun]:
    """Every run of the sweep, validated before any trains: the cross product of ``grids`` x ``seeds`` (the
    base config's seed when ``None``), and a non-private reference per seed when some run's non-private
    counterpart is not planned.  ``knob``: the grid is the old ``--param`` (its checks, its names)."""
    labels = [g.label for g in grids]
    if len(set(labels)) != len(labels):  # two fields named alike: the whole paths name the runs
        grids = [dataclasses.replace(g, label=g.path) for g in grids]
    if len({g.path for g in grids}) != len(grids):
        raise ConfigError("a field is swept twice: give each --grid PATH once")
    runs = []
    for seed in seeds or [base.runtime.seed]:
        seeded = base.with_values({"runtime.seed": seed})
        suffix = "" if seeds is None else f",seed={seed}"
        cells = []
        for values in itertools.product(*(g.values for g in grids)):
            if knob is not None:
                config = knob_config(seeded, knob, values[0])
            else:
                sets = [f"{g.path}={v if isinstance(v, str) else json.dumps(v)}" for g, v in zip(grids, values)]
                config = apply_sets(seeded, sets).validate()
            name = ",".join(f"{g.label}={_text(v)}" for g, v in zip(grids, values)) or "base"
            cell = {g.path: json.dumps(v) if isinstance(v, (dict, list)) else v for g, v in zip(grids, values)}
            cells.append(PlannedRun(name + suffix, config, cell, seed))  # cells group runs: hashable values
        names = [r.name for r in cells]
        if len(set(names)) != len(names):
            twice = next(n for n in names if names.count(n) > 1)
            raise ConfigError(f"two grid values give the same run name {twice!r}: make the values differ in "
                              "letters, digits or . + - = @")
        reference = reference_config(seeded)
        planned = [r.config.to_dict() for r in cells]
        if any(reference_config(r.config).to_dict() not in planned for r in cells):
            runs.append(PlannedRun(REFERENCE + suffix, reference, {"reference": "non-private"}, seed))
        runs += cells
    return runs


def _utility(summary: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"epsilon": summary.get("privacy", {}).get("epsilon"),
                           "stopped": summary.get("privacy", {}).get("stopped")}
    for split in ("seen", "unseen"):
        metrics = summary.get(f"global_{split}") or summary.get(f"local_{split}") or {}
        row[f"{split} R1"] = metrics.get("rank1")
        row[f"{split} mAP"] = metrics.get("mAP")
    return row


def _leakage(ckpt_path: Path, settings: LeakageSettings, device: str) -> dict[str, Any]:
    from privreid.inversion.campaign import invert_checkpoints
    from privreid.retrieval_attacks.retrieval import evaluate_under_attack
    from privreid.checkpoint import Checkpoint
    from privreid.data.catalog import federation_for_config
    from privreid.device import resolve_device

    ckpt = Checkpoint.load(ckpt_path)
    cfg = ckpt.run_config
    dev = resolve_device(device)
    testset = federation_for_config(cfg).seen[0]
    pgd = evaluate_under_attack(ckpt.load_model(device=dev), testset, height=cfg.data.height, width=cfg.data.width,
                                method="pgd", eps=settings.pgd_eps, steps=settings.pgd_steps,
                                max_queries=settings.max_queries, seed=settings.seed, device=dev)
    inversion = _inversion_settings(settings)
    inv = invert_checkpoints([ckpt_path], ckpt_path.parent / "inversion", n=settings.subjects, threat=settings.threat,
                             seed=settings.seed, device=str(dev), progress=False, settings=inversion)
    summary = inv.models[0]["summary"]
    return {**membership_leakage(ckpt_path, settings, device), "PGD mAP": pgd.attacked["mAP"],
            "clean mAP (PGD set)": pgd.clean["mAP"],
            "inversion PSNR": summary["attack"]["psnr"]["mean"],
            "inversion cosine": summary["attack"]["feature_cosine"]["mean"],
            "random PSNR": summary["random"]["psnr"]["mean"],
            "random cosine": summary["random"]["feature_cosine"]["mean"],
            "inversion attack": inversion.describe()}


def _inversion_settings(settings: LeakageSettings):
    """The sweep's inversion attack: privreid's default recipe with the sweep's attack and iterations."""
    from privreid.inversion import InversionSettings

    return InversionSettings(attack=settings.attack, iterations=settings.iterations)


def membership_leakage(ckpt_path: Path, settings: LeakageSettings, device: str) -> dict[str, Any]:
    """``MIA TPR@1% <level>`` of the ``loss`` attack on the released model (:func:`privreid.auditing.run_audit`)."""
    from privreid.auditing import AuditSettings, run_audit

    audit = run_audit([ckpt_path], ckpt_path.parent / "audit", AuditSettings(
        attacks=["loss"], bootstrap=0, max_per_class=settings.mia_max_per_class, seed=settings.seed), device=device)
    return {f"MIA TPR@1% {r['level']}": r["tpr_at_fpr"]["1%"] for r in audit["records"]}


def _cached_leakage(run_dir: Path, settings: LeakageSettings, device: str) -> dict[str, Any]:
    cache = run_dir / "sweep_eval.json"
    key = {**dataclasses.asdict(settings), "inversion": _inversion_settings(settings).record()}  # a new recipe re-measures
    if cache.is_file():
        stored = json.loads(cache.read_text())
        if stored.get("settings") == key:
            return stored["results"]
    results = _leakage(run_dir / "ckpt.pt", settings, device)
    write_text_atomic(cache, json.dumps({"settings": key, "results": results}, indent=2))
    return results


def run_sweep(base: RunConfig, grids: list[Grid], seeds: list[int] | None, out: str | os.PathLike, *,
              knob: str | None = None, executor: ExecutorSettings | None = None,
              leakage: LeakageSettings | None = None, device: str = "auto", progress: bool = True,
              echo: Callable[[str], None] = print) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train (or resume, or skip) every run of the sweep, measure them, write the CSVs and figures; returns
    (one row per run, one row per cell with mean/std/n over seeds)."""
    leakage = leakage or LeakageSettings()
    runs = plan_sweep(base, grids, seeds, knob=knob)  # validates all before training
    out = Path(out)
    outcomes = execute(runs, out, executor or ExecutorSettings(), progress=progress)
    rows, measured = [], []
    for o in outcomes:
        row: dict[str, Any] = {"run": o.run.name, **o.run.cell, "seed": o.run.seed, "status": o.status}
        if o.status == "done":
            row.update(_utility(o.summary))
            if leakage.enabled:
                echo(f"[{o.run.name}] measuring leakage (inversion, PGD)")
                row.update(_cached_leakage(out / o.run.name, leakage, device))
        else:
            echo(f"[{o.run.name}] failed: {o.error}")
            row["error"] = o.error
        rows.append(row)
        measured.append(dataclasses.replace(o, summary=row if o.status == "done" else None))
    metrics = [m for m in ["seen R1", "seen mAP", "unseen R1", "unseen mAP", *PRIVACY, "random PSNR", "random cosine"]
               if any(r.get(m) is not None for r in rows)]
    cells = cell_statistics(measured, metrics)
    write_csv_rows(rows, out / "sweep_runs.csv")
    write_csv_rows(cells, out / "sweep.csv")
    write_frontier(cells, out, utility=[m for m in UTILITY if m in metrics],
                   privacy=[m for m in PRIVACY if m in metrics])
    if len(grids) == 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in grids[0].values):
        plot_sweep(cells, grids[0], out / "sweep.png")
    return rows, cells


def plot_sweep(cells: list[dict[str, Any]], grid: Grid, path: Path) -> Path:
    """Utility vs the knob, utility vs epsilon (when accounted), leakage vs the knob, each cell's mean with
    +-1 std over seeds as error bars; the non-private reference (when run) as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = next((c for c in cells if "reference" in c), {})
    knob = sorted((c for c in cells if grid.path in c), key=lambda c: c[grid.path])
    mean = lambda c, m, scale=1.0: scale * c[f"{m}_mean"] if c.get(f"{m}_mean") is not None else float("nan")  # noqa: E731
    std = lambda c, m, scale=1.0: scale * (c.get(f"{m}_std") or 0.0)  # noqa: E731
    accounted = [c for c in knob if c.get("epsilon_mean") is not None]
    panels = ["utility", "epsilon", "leakage"] if accounted else ["utility", "leakage"]
    if not any(c.get("inversion PSNR_mean") is not None for c in knob):
        panels.remove("leakage")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    xs = [c[grid.path] for c in knob]

    def draw(ax, x, m, scale, label, color, marker="o"):
        ax.errorbar(x, [mean(c, m, scale) for c in knob], yerr=[std(c, m, scale) for c in knob], marker=marker,
                    label=label, color=color, capsize=3)
        if ref.get(f"{m}_mean") is not None:
            ax.axhline(mean(ref, m, scale), color=color, linestyle="--", linewidth=0.8)

    for ax, panel in zip(axes[0], panels):
        if panel in ("utility", "epsilon"):
            x = xs if panel == "utility" else [mean(c, "epsilon") for c in knob]
            for i, m in enumerate(["seen R1", "seen mAP", "unseen R1", "unseen mAP"]):
                draw(ax, x, m, 100.0, m, f"C{i}")
            ax.set_ylabel("%  (dashed: non-private)")
            ax.set_xlabel(grid.label if panel == "utility" else "epsilon (accounted)")
            ax.set_title("utility vs " + (grid.label if panel == "utility" else "epsilon"))
        else:
            for i, (m, scale) in enumerate((("inversion PSNR", 1.0), ("inversion cosine", 10.0), ("PGD mAP", 100.0))):
                label = {"inversion cosine": "feature cosine x10", "PGD mAP": "mAP under PGD (%)"}.get(m, m + " (dB)")
                draw(ax, xs, m, scale, label, f"C{i + 4}")
            if ref.get("random PSNR_mean") is not None:
                ax.axhline(ref["random PSNR_mean"], color="grey", linestyle=":", linewidth=0.8,
                           label="random-image PSNR")
            for i, m in enumerate(m for m in PRIVACY if m.startswith("MIA") and knob[0].get(f"{m}_mean") is not None):
                draw(ax, xs, m, 100.0, m + " (%)", f"C{i + 7}", marker="s")
            ax.set_xlabel(grid.label)
            ax.set_title("leakage and robustness vs " + grid.label)
        ax.legend(fontsize=7)
    return save_figure(fig, path)


#: the columns of the printed table: metric, scale (percent for rates)
_SHOWN = [("seen R1", 100), ("seen mAP", 100), ("unseen R1", 100), ("unseen mAP", 100), ("epsilon", 1),
          ("PGD mAP", 100), ("inversion PSNR", 1), ("MIA TPR@1% image", 100)]


def render_cells(cells: list[dict[str, Any]]) -> str:
    """One row per cell: its setting and each metric as ``mean ± std (n=…)`` (rates in %), failed runs counted."""
    def row(cell: dict[str, Any]) -> dict[str, Any]:
        setting = {k: v for k, v in cell.items() if k != "failed" and not re.search(r"_(mean|std|n|ci95_\w+)$", k)}
        shown = {"cell": ", ".join(f"{k.split('.')[-1]}={_text(v)}" for k, v in setting.items())}
        shown.update({m: mean_pm_std(cell, m, decimals=2 if scale == 1 else 1, scale=scale) for m, scale in _SHOWN
                      if f"{m}_mean" in cell})
        return shown | {"failed": str(cell.get("failed", 0))}

    return format_table([row(c) for c in cells])
