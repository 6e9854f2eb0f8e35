"""An adversarial-retrieval campaign: every (test set, model, attack), the one loop behind ``privreid attack``
and the attack section of ``privreid compare --suite``: :func:`attack_models` (flat records and examples),
:func:`attack_checkpoints` (loads the checkpoints and test sets first), :func:`write_attack_report`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from privreid.checkpoint import label_file_stem
from privreid.data.types import TestSet
from privreid.errors import ConfigError
from privreid.io import write_text_atomic

__all__ = ["attack_checkpoints", "attack_models", "write_attack_report"]


def attack_models(models: list[tuple[str, torch.nn.Module, int, int]], testsets: list[TestSet], *,
                  methods: list[str], eps: float, alpha: float, steps: int, target: str, device,
                  max_queries: int | None = None, batch_size: int = 32, examples: int = 0, seed: int = 0,
                  progress: bool = False, bar: bool = False,
                  record_labels: tuple[str, str] = ("testset", "model")) -> tuple[list[dict[str, Any]], dict]:
    """Attack every ``(label, model, height, width[, interpolation])`` on every test set with every method.

    Returns the records (:meth:`~privreid.retrieval_attacks.retrieval.AttackEvaluation.record`, labelled with
    ``record_labels``) and, per model label, ``(clean examples, {method: adversarial examples})`` from the first
    test set when ``examples > 0``. ``bar``: one bar over the jobs; ``progress``: one per attack.
    """
    from privreid.log import progress_bar

    from privreid.retrieval_attacks.retrieval import evaluate_under_attack

    jobs = [(ts, i, m) for ts in testsets for i in range(len(models)) for m in methods]
    records: list[dict[str, Any]] = []
    pictures: dict[str, tuple] = {}
    for ts, i, m in progress_bar(jobs, desc="attacks", unit="attack", enabled=bar):
        label, net, height, width, *resize = models[i]
        result = evaluate_under_attack(
            net, ts, height=height, width=width, interpolation=resize[0] if resize else "bilinear", method=m, eps=eps, alpha=alpha, steps=steps, target=target,
            device=device, progress=progress, batch_size=batch_size, max_queries=max_queries,
            examples=examples if ts is testsets[0] else 0, seed=seed)
        names = {"testset": ts.name, "model": label}
        records.append(result.record(**{key: names[key] for key in record_labels}))
        if result.example_clean is not None:
            pictures.setdefault(label, (result.example_clean, {}))[1][m] = result.example_adversarial
    return records, pictures


def attack_checkpoints(settings: dict[str, Any], *, client, data, domains, max_queries, batch_size, examples, seed,
                       device, models: list | None = None, precision: str = "fp32",
                       compile: bool = False) -> tuple[list[dict[str, Any]], dict[str, tuple]]:
    """``privreid attack``'s campaign: the models of ``settings["paths"]`` (privreid checkpoints or files from
    elsewhere, :mod:`privreid.models.evaluated`; ``models`` if already loaded) on the test sets of ``data``
    or of the first checkpoint (``domains`` picks some), each at its own input size, its forward passes at
    ``precision`` (:mod:`privreid.precision`), compiled with ``compile`` (:mod:`privreid.models.compilation`); see
    :func:`attack_models`."""
    from privreid.device import resolve_device
    from privreid.evaluation.model_eval import resolve_testsets
    from privreid.models.evaluated import data_source, load_evaluated_models, model_labels
    from privreid.models.compilation import compile_if
    from privreid.precision import at_precision, check_precision

    models = models or load_evaluated_models(settings["paths"])
    for model in models:
        model.require("gradients", "privreid attack", "privreid eval and eval --corruption need no gradients")
    source = data_source(models, data)
    dev = resolve_device(device)
    check_precision(precision, dev)
    testsets = resolve_testsets(source.roots, domains, fmt=source.format, synth_seed=source.synth_seed)
    video = [ts.name for ts in testsets if ts.tracklets is not None]
    if video:
        raise ConfigError(f"the attacks perturb images; {', '.join(video)} hold(s) video tracklets")
    nets = [(label, at_precision(compile_if(m.network(client, device=dev), compile, dev), precision, dev),
             *m.input_size, m.interpolation)
            for label, m in zip(model_labels(models), models)]
    return attack_models(nets, testsets, methods=settings["methods"], eps=settings["eps"], alpha=settings["alpha"],
                         steps=settings["steps"], target=settings["target"], device=dev, max_queries=max_queries,
                         batch_size=batch_size, examples=examples, seed=seed, progress=True, bar=True)


def write_attack_report(out: Path, report: str, records: list[dict[str, Any]], pictures: dict[str, tuple],
                        settings: dict[str, Any]) -> None:
    """``report.md``, ``results.json`` (settings, checkpoints, records), ``results.csv`` and
    ``examples_<model>.png`` in ``out``."""
    from privreid.io import write_csv_rows
    from privreid.retrieval_attacks.retrieval import plot_attack_examples

    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "report.md", report)
    write_text_atomic(out / "results.json", json.dumps(
        {"settings": {k: v for k, v in settings.items() if k != "paths"},
         "checkpoints": [str(p) for p in settings["paths"]], "results": records}, indent=2))
    write_csv_rows(records, out / "results.csv")
    for label, (clean, adversarial) in pictures.items():
        plot_attack_examples(clean, adversarial, settings["eps"], out / f"examples_{label_file_stem(label)}.png",
                             title=f"{label}: clean, adversarial, perturbation")
