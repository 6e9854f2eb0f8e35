"""Centralised vs decentralised on the same data: one table, one row per model.

All models (privreid checkpoints and model files from elsewhere, :mod:`privreid.models.evaluated`) are evaluated on
the seen and unseen test sets of ``--data`` or of the *first* checkpoint's run configuration, so every row is measured
on identical data, each model at its own input size.  A model with no global model (standalone) is represented by its
clients' models: each on its own domain (seen) and on every unseen domain, averaged.  The ``untrained`` row is the
runs' common initialisation (same seed), the chance-level reference.

:func:`run_suites` runs the evaluations of ``privreid compare --suite`` on every model (clean, attacks, corruptions,
inversion, audit, poisoning: :mod:`privreid.reporting.suite`, which writes their report).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from privreid.config import RunConfig
from privreid.corruptions import resolve_corruptions, resolve_pixel_scale
from privreid.data.catalog import federation_for_config
from privreid.data.types import Federation, TestSet
from privreid.device import resolve_device
from privreid.errors import ConfigError
from privreid.evaluation.corrupted_eval import (CIL_REID_PIXEL_SCALE, CIL_REID_REPEATS, corruption_deviations,
                                                evaluate_corrupted)
from privreid.evaluation.model_eval import evaluate_model
from privreid.federated.round_eval import mean_metrics
from privreid.models.evaluated import EvaluatedModel, data_source, load_evaluated_models, model_labels
from privreid.retrieval_attacks.campaign import attack_models
from privreid.retrieval_attacks.feature_attacks import RETRIEVAL_ATTACKS
from privreid.evaluation.metric_registry import headline
from privreid.retrieval_attacks.retrieval import relative_drop
from privreid.seeding import derive_seed, seed_everything

def comparison_rows(name: str, seen: dict[str, float], unseen: dict[str, float] | None) -> dict[str, Any]:
    """One table row: the model's mean seen-domain and unseen-domain metrics."""
    row: dict[str, Any] = {"model": name}
    for split, metrics in (("seen", seen), ("unseen", unseen or {})):
        for key, label in headline():
            row[f"{split} {label}"] = metrics.get(key)
    return row


def _evaluate_sets(model: torch.nn.Module, sets: list[TestSet], size: tuple[int, int], device: torch.device,
                   interpolation: str = "bilinear"):
    return mean_metrics([evaluate_model(model, ts, height=size[0], width=size[1], device=device,
                                        interpolation=interpolation) for ts in sets])


def _row(name: str, model: torch.nn.Module, fed: Federation, size: tuple[int, int], device: torch.device,
         interpolation: str = "bilinear"):
    return comparison_rows(name, _evaluate_sets(model, fed.seen, size, device, interpolation),
                           _evaluate_sets(model, fed.unseen, size, device, interpolation) if fed.unseen else None)


def compare_checkpoints(paths: list[str | os.PathLike], *, untrained: bool = True, device: str = "auto",
                        data: list[str] | None = None, models: list[EvaluatedModel] | None = None,
                        **file_options: Any) -> list[dict[str, Any]]:
    """Evaluate every model (and optionally the untrained init) on the same test sets.

    ``paths``: privreid checkpoints or model files from elsewhere (:mod:`privreid.models.evaluated`; ``file_options``
    say how to read the latter, ``models`` if already loaded), each ranked at its own input size and test resize.  The
    test sets are ``data``'s, else the first checkpoint's.  The ``untrained`` row is the first privreid checkpoint's
    initialisation; with none among the models there is no such row.
    """
    if not paths:
        raise ConfigError("give at least one checkpoint")
    models = models or load_evaluated_models(paths, **file_options)
    source = data_source(models, data)
    fed = federation_for_config(source.config)
    dev = resolve_device(device)
    rows = []
    first = next((m for m in models if m.checkpoint is not None), None)
    if untrained and first is not None:
        seed_everything(derive_seed(first.checkpoint.run_config.runtime.seed, "init"))
        init = first.checkpoint.initial_model().to(dev)
        rows.append(_row("untrained", init, fed, first.input_size, dev))
    for label, model in zip(model_labels(models), models):
        ckpt = model.checkpoint
        if ckpt is None or ckpt.has_global_model:
            rows.append(_row(label, model.network(device=dev), fed, model.input_size, dev, model.interpolation))
            continue
        seen, unseen = [], []
        by_domain = {ts.name: ts for ts in fed.seen}
        domains = {c.name: c.domain for c in fed.clients}
        for client in ckpt.trained_clients:
            net = model.network(client, device=dev)
            if domains.get(client) in by_domain:
                seen.append(_evaluate_sets(net, [by_domain[domains[client]]], model.input_size, dev))
            if fed.unseen:
                unseen.append(_evaluate_sets(net, fed.unseen, model.input_size, dev))
        rows.append(comparison_rows(label + " mean over clients", mean_metrics(seen), mean_metrics(unseen) or None))
    return rows


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
        from privreid.inversion.threat_models import THREATS

        if not THREATS[self.inversion_threat].single_upload:
            raise ConfigError("the suite's inversion always includes the aggregate threat (--clients m); "
                              "--threat picks the single-upload threat next to it")
        if self.inversion_clients is not None:
            from privreid.inversion.aggregate import parse_clients

            self.inversion_clients = parse_clients([str(m) for m in self.inversion_clients])
        if self.inversion_subjects < 1:
            raise ConfigError(f"inversion subjects must be >= 1, got {self.inversion_subjects}")


def _suite_testsets(cfg: RunConfig, settings: SuiteSettings) -> list[TestSet]:
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


def _corruption_record(model: str, testset: str, unit: str, result: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model, "testset": testset, "corruption": unit,
                           "repeats": len(result["repeats"])}
    for key, _ in headline():
        row[f"clean_{key}"] = result["clean"][key]
        row[key] = result["mean"][key]
        row[f"std_{key}"] = result["std"][key]
        row[f"drop_{key}"] = relative_drop(result["clean"][key], result["mean"][key])
    return row


@dataclass
class SuiteRun:
    """What :func:`run_suites` measured (``result``: ``{"clean": rows, "attacks": records, "corruptions":
    records, "inversion": {...}, "audit": records, "poisoning": records, "poisoning_rounds": each backdoor run's
    ASR per round}``), with what its report names."""

    paths: list[Path]
    models: list[EvaluatedModel]
    testsets: list[TestSet]
    #: (model label, the trigger its run trained with)
    backdoors: list
    result: dict[str, Any]
    #: the inversion suite's attack and budget (:meth:`privreid.inversion.InversionSettings.describe`)
    recipe: str | None = None


def run_suites(paths: list[str | os.PathLike], out: str | os.PathLike, settings: SuiteSettings, *,
               device: str = "auto", progress: bool = False, data: list[str] | None = None,
               models: list | None = None, **file_options: Any) -> SuiteRun:
    """Run the selected evaluations on every model on the same test sets (:mod:`privreid.reporting.suite`).

    ``paths`` (and ``file_options``, ``models``) and the test sets as for :func:`compare_checkpoints`.  The inversion
    and audit suites need privreid checkpoints (a client's update, its training data) and write their files into
    ``out/inversion`` and ``out/audit``; the attacks suite needs gradients.
    """
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
    testsets = _suite_testsets(source.config, settings)
    backdoors = []  # resolved before anything is written
    if "poisoning" in settings.suites:
        from privreid.malicious_clients.backdoor import recorded_backdoor

        recorded = [(label, recorded_backdoor(m.checkpoint.run_config)) for label, m in zip(labels, models)
                    if m.checkpoint is not None]
        backdoors = [(label, b) for label, b in recorded if b is not None]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run = SuiteRun(paths, models, testsets, backdoors, {k: {} if k == "inversion" else [] for k in (
        "clean", "attacks", "corruptions", "inversion", "audit", "poisoning", "poisoning_rounds")})
    result = run.result

    def evaluated_models():
        for label, model in zip(labels, models):
            if model.checkpoint is not None and not model.checkpoint.has_global_model:
                raise ConfigError(f"{label}: method {model.checkpoint.method!r} has no global model; the suite "
                                  "compares global models (use privreid attack/invert --client for standalone runs)")
            yield label, model.network(device=dev), model.input_size

    if "clean" in settings.suites:
        result["clean"] = compare_checkpoints(paths, device=device, data=data, models=models)
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
    if "inversion" in settings.suites:
        from privreid.inversion import InversionSettings
        from privreid.inversion.campaign import invert_checkpoints

        inversion = InversionSettings(attack=settings.inversion_attack, iterations=settings.inversion_iterations)
        inv = invert_checkpoints(paths, out / "inversion", n=settings.inversion_subjects,
                                 threat=settings.inversion_threat, seed=settings.seed, device=str(dev),
                                 progress=progress, settings=inversion)
        agg = invert_checkpoints(paths, out / "inversion" / "aggregate", threat="aggregate",
                                 n=settings.inversion_subjects, clients=settings.inversion_clients, seed=settings.seed,
                                 device=str(dev), progress=progress, skip_refused=True, settings=inversion)
        result["inversion"] = {"table": inv.table, "models": inv.models,
                               "aggregate": {"table": agg.table, "models": agg.models}}
        run.recipe = inversion.describe()
    if "audit" in settings.suites:
        from privreid.auditing import AuditSettings, run_audit

        result["audit"] = run_audit(paths, out / "audit", AuditSettings(
            attacks=settings.audit_attacks, seed=settings.seed, max_per_class=settings.audit_max_per_class),
            device=device)["records"]
    if "poisoning" in settings.suites and backdoors:
        from privreid.evaluation.backdoor import backdoor_records

        result["poisoning"] = backdoor_records(list(evaluated_models()), backdoors, testsets, device=dev,
                                               progress=progress)
        trained_with = dict(backdoors)
        result["poisoning_rounds"] = [row for label, path in zip(labels, paths) if label in trained_with
                                      for row in backdoor_rounds(label, path.parent / "metrics.jsonl")]
    return run


def backdoor_rounds(label: str, metrics: Path) -> list[dict[str, Any]]:
    """The ASR per evaluated round a backdoor run recorded during training (``metrics.jsonl`` records of scope
    ``backdoor``, :meth:`privreid.malicious_clients.backdoor.Backdoor.round_records`), labelled ``run``; none
    when the file is not there (a checkpoint copied without its run)."""
    if not metrics.is_file():
        return []
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [{"run": label, "round": r["round"], "testset": r["testset"], "asr": r.get("asr"),
             "asr_clean_gallery": r.get("asr_clean_gallery"), "triggered_mAP": r["triggered_mAP"],
             "clean_mAP": r["clean_mAP"]} for r in records if r.get("scope") == "backdoor"]
