"""Deterministic seeding.

Every random draw of a run is derived from ``(seed, round, client)`` so that a
run resumed from a checkpoint at round ``r`` makes exactly the draws an
uninterrupted run makes from round ``r`` on.  RNG states are additionally saved
in checkpoints for inspection, but determinism does not depend on them.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any printable parts (stable across processes)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_states() -> dict:
    """Current numpy / torch RNG states, in checkpoint-safe types."""
    np_state = np.random.get_state()
    return {
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2])},
        "torch": torch.get_rng_state(),
    }
