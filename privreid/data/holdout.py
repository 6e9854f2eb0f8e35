"""``--audit-holdout F``: keep a seeded fraction of each client's training images out of training.

They are a membership audit's image-level non-members (:mod:`privreid.auditing`): same identities and cameras,
never trained on. Per client and identity with ``n`` images, ``round(F n)`` are held out, at most ``n - 1`` (labels
and identity membership unchanged), drawn from ``(seed, client name)`` only.
:class:`~privreid.data.types.Federation.holdout` records them with client labels; the checkpoint keeps it.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import defaultdict

import numpy as np

from privreid.errors import ConfigError
from privreid.data.types import Federation, Sample


def holdout_split(samples: list[Sample], fraction: float, rng: np.random.Generator) -> tuple[list[Sample], list[Sample]]:
    """``(kept, held_out)``: per identity, ``min(round(fraction n), n - 1)`` of its ``n`` images held out."""
    by_pid: dict[int, list[int]] = defaultdict(list)
    for i, (_, pid, _) in enumerate(samples):
        by_pid[pid].append(i)
    out: set[int] = set()
    for pid in sorted(by_pid):
        idx = by_pid[pid]
        k = min(int(round(fraction * len(idx))), len(idx) - 1)
        out.update(int(i) for i in rng.permutation(idx)[:k])
    return ([s for i, s in enumerate(samples) if i not in out], [s for i, s in enumerate(samples) if i in out])


def apply_audit_holdout(federation: Federation, fraction: float, seed: int) -> Federation:
    """``federation`` with the held-out images removed from every client and recorded in ``holdout``."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"--audit-holdout must lie in [0, 1), got {fraction}")
    clients, holdout = [], {}
    for client in federation.clients:
        if client.tracklets is not None:
            raise ConfigError("--audit-holdout holds out images; video (tracklet) clients are not supported")
        rng = np.random.default_rng([seed, zlib.crc32(client.name.encode("utf-8")), 0xA0D17])
        kept, held = holdout_split(client.train, fraction, rng)
        clients.append(dataclasses.replace(client, train=kept))
        holdout[client.name] = held
    return dataclasses.replace(federation, clients=clients, holdout=holdout)
