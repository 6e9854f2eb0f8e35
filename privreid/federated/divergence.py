"""Divergence: a non-finite training loss stops the run with one line; metric lines stay valid JSON.

A learning rate that is finite but far too large (``--lr-backbone 1e30``) drives the weights to inf/NaN within a
round.  The engine checks every client's training loss right after its local update (:func:`check_finite_training`),
before the model is evaluated, aggregated or checkpointed, so the checkpoint of the last good round stays as it was
and the run stops with :class:`TrainingDiverged` (one ``error:`` line) instead of failing later with a misleading
message about NaN features.  A finite loss does not prove finite weights, so the states about to be checkpointed are
checked too (:func:`check_finite_states`): no checkpoint ever holds a non-finite weight.

``metrics.jsonl`` lines are written with :func:`json_line`: a non-finite number becomes ``null`` (Python's ``json``
would write the bare token ``NaN``, which is not JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from privreid.errors import PrivreidError
from privreid.io import finite_or_none

#: what a run that diverged should try next
LOWER_THE_RATES = "lower the learning rates (--lr-backbone, --lr-head, --lr-neck)"


class TrainingDiverged(PrivreidError):
    """The training loss became inf or NaN."""


def json_line(rec: dict[str, Any]) -> str:
    """One ``metrics.jsonl`` line: valid JSON, with ``null`` for non-finite numbers."""
    return json.dumps(finite_or_none(rec), allow_nan=False) + "\n"


def _kept(round_no: int, out_dir: Path) -> str:
    """What a run that diverged in round ``round_no`` keeps: the previous round's checkpoint, if any."""
    return (f"the checkpoint of round {round_no - 1} ({Path(out_dir) / 'ckpt.pt'}) is kept"
            if round_no > 1 else "no checkpoint was written")


def check_finite_training(uploads: Iterable, round_no: int, out_dir: Path) -> None:
    """Raise :class:`TrainingDiverged` if any upload's training loss is not finite.

    ``uploads`` are :class:`~privreid.federated.strategy.Upload` objects
    (their ``metrics`` hold the client's mean training ``loss``).  The
    message names the round and client and says which checkpoint is kept.
    """
    for upload in uploads:
        loss = upload.metrics.get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise TrainingDiverged(
                f"training diverged in round {round_no}: client {upload.client}'s loss is {float(loss)}; "
                f"{_kept(round_no, out_dir)}; {LOWER_THE_RATES}")


def check_finite_states(states: Mapping[str, Mapping[str, Any]], round_no: int, out_dir: Path) -> None:
    """Raise :class:`TrainingDiverged` if a state about to be checkpointed holds an inf or NaN weight.

    ``states`` maps what each state is ("the global model", "client X's local state") to it.  A finite loss does not
    prove finite weights (a NaN momentum or an update that overflows after the loss was taken), and a checkpoint of NaN
    weights scores at chance; checked right before the checkpoint is written, so the one kept is the last finite one.
    """
    for what, state in states.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
                raise TrainingDiverged(f"training diverged in round {round_no}: {what} has non-finite weights "
                                       f"({key}); {_kept(round_no, out_dir)}; {LOWER_THE_RATES}")
