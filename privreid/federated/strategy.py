"""Server strategies: how the uploads of one round are combined.

``Strategy.aggregate(global_state, uploads)`` is a pure function of its inputs
(no training, no data access), so every strategy is unit-testable on hand-made
state dicts.  The server sees only what :class:`Upload` carries: the shared
parameters, the client's sample count and scalar metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .policy import StateDict


@dataclass
class Upload:
    """What one client sends to the server after local training."""

    client: str
    state: StateDict
    num_samples: int
    metrics: dict[str, float] = field(default_factory=dict)


class Strategy:
    """Base class; subclasses implement :meth:`aggregate`.

    Streaming.  A strategy that is linear in the uploads (a weighted mean)
    also returns an :class:`Accumulator` from :meth:`accumulator`: the engine
    then folds each upload into it as it arrives and drops the upload, so the
    server holds one running sum instead of one shared state per client (the
    shape secure aggregation needs as well: the server sees only a sum).
    Strategies that need every upload at once (CDW, KS, clustering, KD)
    return ``None`` and receive the list.  For a streaming strategy,
    ``aggregate(g, uploads)`` is defined as the fold, so both paths give
    bit-identical results.
    """

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        acc = self.accumulator(global_state)
        if acc is None:
            raise NotImplementedError
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        for up in uploads:
            acc.add(up)
        return acc.result()

    def accumulator(self, global_state: StateDict) -> "Accumulator | None":
        """A fresh streaming fold of this round's uploads, or ``None`` if the strategy needs them all at once."""
        return None


class Accumulator:
    """A streaming aggregation: :meth:`add` each upload once, then :meth:`result`."""

    def add(self, upload: Upload) -> None:
        raise NotImplementedError

    def result(self) -> StateDict:
        raise NotImplementedError


class WeightedSum(Accumulator):
    """``sum_k w_k state_k / sum_k w_k`` folded one upload at a time, in float64.

    ``weight(upload)`` gives ``w_k``.  Integer buffers (BatchNorm's
    ``num_batches_tracked``) cannot be averaged meaningfully; they are taken
    from the upload with the largest weight (the first one on ties).  Only the
    running sums and those small integer tensors are held, never an upload.
    """

    def __init__(self, weight: Callable[[Upload], float]):
        self.weight = weight
        self.sums: dict[str, torch.Tensor] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.integers: StateDict = {}
        self.total = 0.0
        self.heaviest = float("-inf")
        self.first: str | None = None
        self.count = 0

    def add(self, upload: Upload) -> None:
        w = float(self.weight(upload))
        if self.first is None:
            self.first = upload.client
            for key, value in upload.state.items():
                if torch.is_floating_point(value):
                    self.sums[key] = torch.zeros_like(value, dtype=torch.float64)
                    self.dtypes[key] = value.dtype
        elif upload.state.keys() != self.sums.keys() | self.integers.keys():
            raise ValueError(f"client {upload.client} uploaded a different set of keys")
        for key, acc in self.sums.items():
            acc.add_(upload.state[key].to(torch.float64), alpha=w)
        if w > self.heaviest:
            self.heaviest = w
            self.integers = {k: v.clone() for k, v in upload.state.items() if not torch.is_floating_point(v)}
        self.total += w
        self.count += 1

    def result(self) -> StateDict:
        if self.count == 0:
            raise ValueError("cannot aggregate zero uploads")
        if self.total <= 0:
            raise ValueError("aggregation weights must sum to a positive value")
        out: StateDict = {k: (acc / self.total).to(self.dtypes[k]) for k, acc in self.sums.items()}
        out.update(self.integers)
        return out


def weighted_average(uploads: list[Upload], weights: list[float]) -> StateDict:
    """``sum_k w_k * state_k / sum_k w_k`` for floating tensors (see :class:`WeightedSum`).

    For strategies whose weights depend on every upload at once (CDW, KS):
    the weights are known up front, so the fold is the same as streaming.
    """
    if not uploads:
        raise ValueError("cannot aggregate zero uploads")
    if len(weights) != len(uploads):
        raise ValueError("one weight per upload is required")
    by_upload = {id(up): float(w) for up, w in zip(uploads, weights)}
    acc = WeightedSum(lambda up: by_upload[id(up)])
    for up in uploads:
        acc.add(up)
    return acc.result()


class DataVolumeAverage(Strategy):
    """FedAvg / FedPav server aggregation, ``w = sum_k (n_k / n) w_k``.

    Paper 004, Algorithm 1, line 7; ``n`` is the total volume of the clients
    selected this round.
    """

    def accumulator(self, global_state: StateDict) -> WeightedSum:
        return WeightedSum(lambda upload: float(upload.num_samples))


class UniformAverage(Strategy):
    """Unweighted mean of the uploads, ``1/|C N| sum_m w_m`` (FedReID, paper 002, Eq. 9)."""

    def accumulator(self, global_state: StateDict) -> WeightedSum:
        return WeightedSum(lambda upload: 1.0)


class KeepGlobal(Strategy):
    """No aggregation: the global state is returned unchanged (standalone training)."""

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        return dict(global_state)
