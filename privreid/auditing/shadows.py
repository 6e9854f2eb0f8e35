"""LiRA's shadow models, trained by privreid itself with the audited run's configuration.

Each candidate of :mod:`privreid.auditing.membership` is IN for exactly half of the K shadows
(:func:`~privreid.auditing.lira.balanced_masks`, Carlini et al.'s split): an OUT member's images leave its
client, an IN non-member's join its home client. Only the seed differs (``seed + 1000 + i``), so shadows
sample the training randomness too. Cached under ``DIR/shadows/<level>-<scope>-K<K>-<hash>/`` (``masks.npy``,
one run per shadow; the hash covers configuration, candidates, seed): finished shadows are reused, partial
ones resumed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Callable

import numpy as np

from privreid.config import RunConfig
from privreid.data.types import Federation, relabel
from privreid.auditing.lira import balanced_masks
from privreid.auditing.membership import MembershipSet, _identity
from privreid.composition import build_run


def shadow_federation(base: Federation, ms: MembershipSet, include: np.ndarray) -> Federation:
    """``base`` with the candidates of ``ms`` included where ``include`` is true and excluded elsewhere."""
    drop = {(client, path) for c, inc in zip(ms.candidates, include) if c.member and not inc
            for client, path, _ in c.train}
    add: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for c, inc in zip(ms.candidates, include):
        if inc and not c.member:
            for client, path, cam in c.train:
                add[client].append((path, c.identity, cam))
    clients = []
    for client in base.clients:
        keyed = [(path, _identity(client, label), cam) for path, label, cam in client.train
                 if (client.name, path) not in drop] + add[client.name]
        clients.append(dataclasses.replace(client, train=relabel(keyed), source_pids=None))
    return dataclasses.replace(base, clients=clients, holdout={})


def shadow_config(config: RunConfig, index: int) -> RunConfig:
    return config.with_values({"runtime.seed": config.runtime.seed + 1000 + index,
                               "evaluation.every": config.federation.rounds})


def shadow_dir(cache: Path, config: RunConfig, ms: MembershipSet, k: int, seed: int) -> Path:
    payload = json.dumps({"config": config.to_dict(), "seed": seed, "level": ms.level, "scope": ms.scope,
                          "candidates": [[c.key, c.member] for c in ms.candidates]}, sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:10]
    scope = (ms.scope or "all").replace("/", "_")
    return cache / "shadows" / f"{ms.level}-{scope}-K{k}-{digest}"


def train_shadows(config: RunConfig, base: Federation, ms: MembershipSet, k: int, cache: Path, *, seed: int = 0,
                  progress: bool = False, echo: Callable[[str], None] = lambda _: None) -> tuple[np.ndarray, list[Path]]:
    """Train (or reuse, or resume) the K shadow models; ``(masks (K, n), checkpoint paths)``."""
    from privreid.federated.engine import FederatedEngine
    from privreid.rundir import prepare_out_dir

    masks = balanced_masks(k, len(ms.candidates), seed)
    root = shadow_dir(cache, config, ms, k, seed)
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "masks.npy", masks)
    paths = []
    for i in range(k):
        run = root / f"shadow_{i}"
        paths.append(run / "ckpt.pt")
        if (run / "summary.json").is_file():
            continue
        resume = (run / "ckpt.pt").is_file()
        echo(f"shadow {i + 1}/{k} ({'resuming' if resume else 'training'}) in {run}")
        engine = FederatedEngine(shadow_config(config, i), shadow_federation(base, ms, masks[i]), run,
                                 progress=progress, log=lambda _: None, build=build_run)
        prepare_out_dir(run, overwrite=not resume, resume=resume)
        engine.run(resume=resume)
    return masks, paths
