"""Server strategies: how the uploads of one round are combined.

``Strategy.aggregate(global_state, uploads)`` is a pure function of its inputs
(no training, no data access), so every strategy is unit-testable on hand-made
state dicts.  The server sees only what :class:`Upload` carries: the shared
parameters, the client's sample count and scalar metrics.
"""

from __future__ import annotations

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
    """Base class; subclasses implement :meth:`aggregate`."""

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        raise NotImplementedError


def weighted_average(uploads: list[Upload], weights: list[float]) -> StateDict:
    """``sum_k w_k * state_k`` for floating tensors (weights normalised to 1).

    Integer buffers (BatchNorm's ``num_batches_tracked``) cannot be averaged
    meaningfully; they are taken from the client with the largest weight.
    """
    if not uploads:
        raise ValueError("cannot aggregate zero uploads")
    if len(weights) != len(uploads):
        raise ValueError("one weight per upload is required")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("aggregation weights must sum to a positive value")
    norm = [w / total for w in weights]
    heaviest = max(range(len(uploads)), key=lambda i: norm[i])
    keys = uploads[0].state.keys()
    for up in uploads[1:]:
        if up.state.keys() != keys:
            raise ValueError(f"client {up.client} uploaded a different set of keys")
    out: StateDict = {}
    for key in keys:
        ref = uploads[0].state[key]
        if torch.is_floating_point(ref):
            acc = torch.zeros_like(ref, dtype=torch.float64)
            for w, up in zip(norm, uploads):
                acc += w * up.state[key].to(torch.float64)
            out[key] = acc.to(ref.dtype)
        else:
            out[key] = uploads[heaviest].state[key].clone()
    return out


class DataVolumeAverage(Strategy):
    """FedAvg / FedPav server aggregation, ``w = sum_k (n_k / n) w_k``.

    Paper 004, Algorithm 1, line 7; ``n`` is the total volume of the clients
    selected this round.
    """

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        return weighted_average(uploads, [float(u.num_samples) for u in uploads])


class UniformAverage(Strategy):
    """Unweighted mean of the uploads, ``1/|C N| sum_m w_m`` (FedReID, paper 002, Eq. 9)."""

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        return weighted_average(uploads, [1.0] * len(uploads))


class KeepGlobal(Strategy):
    """No aggregation: the global state is returned unchanged (standalone training)."""

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        return dict(global_state)
