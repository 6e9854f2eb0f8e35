"""Centralised vs decentralised on the same data: one table, one row per model.

All models (privreid checkpoints and model files from elsewhere,
:mod:`privreid.models.evaluated`) are evaluated on the seen and unseen test
sets of ``--data`` or of the *first* checkpoint's run configuration, so every
row is measured on identical data, each model at its own input size.
A model with no global model (standalone) is represented by its clients'
models: each on its own domain (seen) and on every unseen domain, averaged.
The ``untrained`` row is the runs' common initialisation (same seed), the
chance-level reference.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from privreid.data.catalog import federation_for_config
from privreid.data.types import Federation, TestSet
from privreid.errors import ConfigError
from privreid.evaluation.model_eval import evaluate_model
from privreid.device import resolve_device
from privreid.federated.round_eval import mean_metrics
from privreid.models.evaluated import EvaluatedModel, data_source, load_evaluated_models, model_labels
from privreid.reporting import comparison_rows
from privreid.seeding import derive_seed, seed_everything


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

    ``paths``: privreid checkpoints or model files from elsewhere
    (:mod:`privreid.models.evaluated`; ``file_options`` say how to read the
    latter, ``models`` if already loaded), each ranked at its own input size
    and test resize.  The test sets are ``data``'s, else the first checkpoint's.  The
    ``untrained`` row is the first privreid checkpoint's initialisation; with
    none among the models there is no such row.
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
        seed_everything(derive_seed(first.checkpoint.run_config.train.seed, "init"))
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
