"""Privacy/utility sweeps: one run per value of a privacy knob, then utility and leakage against the knob.

This extends paper 002's Fig. 3 (FedReID's utility as its white-noise scale
beta grows) to accounted differential privacy.  ``run_sweep`` trains one run
per value into ``OUT/<param>=<value>/`` plus a non-private ``OUT/reference/``
run with the same settings, then measures for every run, on the same data:

* utility: the final global R1 / mAP on the seen and unseen domains
  (``summary.json``), and the accounted epsilon (``None`` for beta alone,
  which has no formal guarantee);
* leakage through the uploads: gradient inversion
  (:mod:`privreid.inversion`) on the same subjects for every run,
  PSNR and feature cosine, with the random-image baseline;
* adversarial robustness: mAP under PGD (:mod:`privreid.retrieval_attacks.retrieval`)
  on the first seen test set;
* membership leakage of the released model: TPR at 1% FPR of the ``loss``
  attack at the image and the identity level (:mod:`privreid.auditing`; capped
  at ``mia_max_per_class`` members and non-members).

Resumable: a run with a ``summary.json`` is finished and skipped, a run with
only a checkpoint is resumed, and each run's measurements are cached in
``OUT/<run>/sweep_eval.json`` (recomputed when the measurement settings
change).  Writes ``OUT/sweep.csv`` and ``OUT/sweep.png``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from privreid.config import RunConfig
from privreid.errors import ConfigError
from privreid.io import save_figure, write_csv_rows, write_file_atomically

#: CLI knob name -> TrainConfig field
KNOBS = {"beta": "beta", "noise-multiplier": "noise_multiplier", "target-epsilon": "target_epsilon", "clip": "clip"}
REFERENCE = "reference"


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


def knob_config(base: RunConfig, param: str, value: float) -> RunConfig:
    """``base`` with the knob set to ``value``; raises ConfigError when the knob has no effect in ``base``."""
    if param not in KNOBS:
        raise ConfigError(f"unknown --param {param!r}; choose from {', '.join(KNOBS)}")
    t = base.train
    if param in ("noise-multiplier", "target-epsilon") and not (t.dp_sgd or t.client_dp):
        raise ConfigError(f"--param {param} needs --dp-sgd or --client-dp among the train options")
    if param == "clip" and not t.client_dp:
        raise ConfigError("--param clip needs --client-dp among the train options")
    config = dataclasses.replace(base, train=dataclasses.replace(t, **{KNOBS[param]: value}))
    config.validate()
    return config


def reference_config(base: RunConfig) -> RunConfig:
    """The non-private run: ``base`` without beta noise, DP-SGD or client-level DP."""
    return dataclasses.replace(base, train=dataclasses.replace(
        base.train, beta=0.0, dp_sgd=False, client_dp=False, noise_multiplier=None, max_grad_norm=None, clip=None,
        target_epsilon=None, delta=None))


def run_name(param: str, value: float) -> str:
    return f"{param}={value:g}"


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
    write_file_atomically(cache, lambda tmp: tmp.write_text(json.dumps({"settings": key, "results": results},
                                                                       indent=2)))
    return results


def run_sweep(base: RunConfig, param: str, values: list[float], out: str | os.PathLike, *,
              leakage: LeakageSettings | None = None, device: str = "auto", progress: bool = True,
              echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Train (or resume, or skip) every run of the sweep, measure them, write ``sweep.csv`` and ``sweep.png``."""
    from privreid.training import train_run

    leakage = leakage or LeakageSettings()
    runs = [(REFERENCE, None, reference_config(base))]
    runs += [(run_name(param, v), v, knob_config(base, param, v)) for v in values]  # validates all before training
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, value, config in runs:
        run_dir = out / name
        if (run_dir / "summary.json").is_file():
            echo(f"[{name}] finished earlier; skipping training")
            summary = json.loads((run_dir / "summary.json").read_text())
        else:
            resume = (run_dir / "ckpt.pt").is_file()
            echo(f"[{name}] {'resuming' if resume else 'training'}")
            summary = train_run(config, run_dir, resume=resume, overwrite=not resume and run_dir.exists(),
                                progress=progress)
        row = {"run": name, "param": param, "value": value, **_utility(summary)}
        if leakage.enabled:
            echo(f"[{name}] measuring leakage (inversion, PGD)")
            row.update(_cached_leakage(run_dir, leakage, device))
        rows.append(row)
    write_csv_rows(rows, out / "sweep.csv")
    plot_sweep(rows, param, out / "sweep.png")
    return rows


def plot_sweep(rows: list[dict[str, Any]], param: str, path: Path) -> Path:
    """Utility vs the knob, utility vs epsilon (when accounted), leakage vs the knob; the reference as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = next(r for r in rows if r["run"] == REFERENCE)
    knob = sorted((r for r in rows if r["run"] != REFERENCE), key=lambda r: r["value"])
    accounted = [r for r in knob if r.get("epsilon") is not None]
    panels = ["utility", "epsilon", "leakage"] if accounted else ["utility", "leakage"]
    if "inversion PSNR" not in ref:
        panels.remove("leakage")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    xs = [r["value"] for r in knob]
    metrics = ["seen R1", "seen mAP", "unseen R1", "unseen mAP"]
    for ax, panel in zip(axes[0], panels):
        if panel in ("utility", "epsilon"):
            x = xs if panel == "utility" else [r["epsilon"] for r in knob]
            for i, m in enumerate(metrics):
                ys = [100 * r[m] if r.get(m) is not None else float("nan") for r in knob]
                line, = ax.plot(x, ys, marker="o", label=m, color=f"C{i}")
                if ref.get(m) is not None:
                    ax.axhline(100 * ref[m], color=line.get_color(), linestyle="--", linewidth=0.8)
            ax.set_ylabel("%  (dashed: non-private)")
            ax.set_xlabel(param if panel == "utility" else "epsilon (accounted)")
            ax.set_title("utility vs " + (param if panel == "utility" else "epsilon"))
        else:
            for i, (m, scale) in enumerate((("inversion PSNR", 1.0), ("inversion cosine", 10.0), ("PGD mAP", 100.0))):
                label = {"inversion cosine": "feature cosine x10", "PGD mAP": "mAP under PGD (%)"}.get(m, m + " (dB)")
                line, = ax.plot(xs, [scale * r[m] for r in knob], marker="o", label=label, color=f"C{i + 4}")
                ax.axhline(scale * ref[m], color=line.get_color(), linestyle="--", linewidth=0.8)
            ax.axhline(ref["random PSNR"], color="grey", linestyle=":", linewidth=0.8, label="random-image PSNR")
            for i, m in enumerate(k for k in ref if k.startswith("MIA TPR@1%")):
                line, = ax.plot(xs, [100 * r[m] for r in knob], marker="s", label=m + " (%)", color=f"C{i + 7}")
                ax.axhline(100 * ref[m], color=line.get_color(), linestyle="--", linewidth=0.8)
            ax.set_xlabel(param)
            ax.set_title("leakage and robustness vs " + param)
        ax.legend(fontsize=7)
    return save_figure(fig, path)
