"""Divergence: a non-finite training loss stops the run with one line; metric lines stay valid JSON.

A learning rate that is finite but far too large (``--lr-backbone 1e30``)
drives the weights to inf/NaN within a round.  The engine checks every
client's training loss right after its local update
(:func:`check_finite_training`), before the model is evaluated, aggregated or
checkpointed, so the checkpoint of the last good round stays as it was and
the run stops with :class:`TrainingDiverged` (one ``error:`` line) instead
of failing later with a misleading message about NaN features.

``metrics.jsonl`` lines are written with :func:`json_line`: a non-finite
number becomes ``null`` (Python's ``json`` would write the bare token
``NaN``, which is not JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import PrivreidError


class TrainingDiverged(PrivreidError):
    """The training loss became inf or NaN."""


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def json_line(rec: dict[str, Any]) -> str:
    """One ``metrics.jsonl`` line: valid JSON, with ``null`` for non-finite numbers."""
    return json.dumps(_finite_or_none(rec), allow_nan=False) + "\n"


def check_finite_training(uploads: Iterable, round_no: int, out_dir: Path) -> None:
    """Raise :class:`TrainingDiverged` if any upload's training loss is not finite.

    ``uploads`` are :class:`~privreid.federated.strategy.Upload` objects
    (their ``metrics`` hold the client's mean training ``loss``).  The
    message names the round and client and says which checkpoint is kept.
    """
    for upload in uploads:
        loss = upload.metrics.get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            kept = (f"the checkpoint of round {round_no - 1} ({Path(out_dir) / 'ckpt.pt'}) is kept"
                    if round_no > 1 else "no checkpoint was written")
            raise TrainingDiverged(
                f"training diverged in round {round_no}: client {upload.client}'s loss is {float(loss)}; "
                f"{kept}; lower the learning rates (--lr-backbone, --lr-head, --lr-neck)")
