"""Centralised vs decentralised on the same data: one table, one row per model.

All checkpoints are evaluated on the seen and unseen test sets of the *first*
checkpoint's run configuration, so every row is measured on identical data.
A model with no global model (standalone) is represented by its clients'
models: each on its own domain (seen) and on every unseen domain, averaged.
The ``untrained`` row is the runs' common initialisation (same seed), the
chance-level reference.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .checkpoint import load_checkpoint, load_model
from .config import RunConfig
from .data.catalog import federation_for_config
from .data.types import Federation, TestSet
from .errors import ConfigError
from .evaluation.model_eval import evaluate_model
from .device import resolve_device
from .federated.engine import mean_metrics
from .models import build_from_config
from .reporting import comparison_rows
from .seeding import derive_seed, seed_everything


def _evaluate_sets(model: torch.nn.Module, sets: list[TestSet], cfg: RunConfig, device: torch.device):
    return mean_metrics([evaluate_model(model, ts, height=cfg.data.height, width=cfg.data.width, device=device)
                         for ts in sets])


def _row(name: str, model: torch.nn.Module, fed: Federation, cfg: RunConfig, device: torch.device):
    return comparison_rows(name, _evaluate_sets(model, fed.seen, cfg, device),
                           _evaluate_sets(model, fed.unseen, cfg, device) if fed.unseen else None)


def compare_checkpoints(paths: list[str | os.PathLike], *, untrained: bool = True,
                        device: str = "auto") -> list[dict[str, Any]]:
    """Evaluate every checkpoint (and optionally the untrained init) on the same test sets."""
    if not paths:
        raise ConfigError("give at least one checkpoint")
    ckpts = [(Path(p), load_checkpoint(p)) for p in paths]
    cfg = RunConfig.from_dict(ckpts[0][1]["config"])
    fed = federation_for_config(cfg)
    dev = resolve_device(device)
    rows = []
    if untrained:
        seed_everything(derive_seed(cfg.train.seed, "init"))
        init = build_from_config({**ckpts[0][1]["model_config"], "num_classes": 0}).to(dev)
        rows.append(_row("untrained", init, fed, cfg, dev))
    for path, ckpt in ckpts:
        label = f"{ckpt['method']} ({path.parent.name})"
        if ckpt.get("has_global_model", True):
            rows.append(_row(label, load_model(ckpt, device=dev), fed, cfg, dev))
            continue
        seen, unseen = [], []
        by_domain = {ts.name: ts for ts in fed.seen}
        domains = {c.name: c.domain for c in fed.clients}
        for client in sorted(ckpt["client_states"]):
            model = load_model(ckpt, client=client, device=dev)
            if domains.get(client) in by_domain:
                seen.append(_evaluate_sets(model, [by_domain[domains[client]]], cfg, dev))
            if fed.unseen:
                unseen.append(_evaluate_sets(model, fed.unseen, cfg, dev))
        rows.append(comparison_rows(label + " mean over clients", mean_metrics(seen), mean_metrics(unseen) or None))
    return rows
