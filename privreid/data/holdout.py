"""``--audit-holdout F``: keep a seeded fraction of each client's training images out of training.

The held-out images are the image-level non-members of a membership audit
(:mod:`privreid.auditing`): the same identities and cameras as the members,
never trained on.  Per client and per identity with ``n`` training images,
``round(F n)`` images are held out, at most ``n - 1`` so that every identity
keeps a training image (the client's labels stay ``0..n_classes-1`` and
identity-level membership is unchanged).  The draw is seeded by
``(seed, client name)`` only, so it does not depend on the other clients.
:class:`~privreid.data.types.Federation.holdout` records which images, with
their client labels; the engine saves it in the checkpoint.
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
