"""FedReID's white-noise privacy protection (Wu & Gong, paper 002).

* upload (Eq. 14): the server adds ``beta * N(0, 1)`` to the aggregate,
  hiding the contributions of the selected clients;
* download (Eq. 15): every client receives the model plus ``beta * N(0, 1)``;
* both: single vs double protection of the paper's Fig. 3.

Noise is added to every shared floating-point tensor, BatchNorm running
statistics included (they are part of what is transmitted); integer buffers
are left alone.  There is no formal guarantee: the updates are not clipped, so
no epsilon can be claimed (the run summary says so).  Noise is drawn from the
torch RNG, which the engine seeds per round (server) and per client
(download), so noisy runs stay deterministic and resumable.
"""

from __future__ import annotations

import dataclasses

import torch

from ..federated.policy import StateDict
from ..federated.registry import Method
from ..federated.strategy import Strategy, Upload


def add_white_noise(state: StateDict, beta: float) -> StateDict:
    """``state + beta * N(0, 1)`` on floating tensors (new tensors; input untouched)."""
    return {k: v + beta * torch.randn_like(v) if torch.is_floating_point(v) else v.clone()
            for k, v in state.items()}


class NoisyAggregate(Strategy):
    """Eq. 14: the inner strategy's aggregate plus white noise."""

    def __init__(self, inner: Strategy, beta: float):
        self.inner, self.beta = inner, beta

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        return add_white_noise(self.inner.aggregate(global_state, uploads), self.beta)


def with_beta_noise(method: Method, beta: float, mode: str) -> Method:
    """``method`` with white noise on upload (Eq. 14), download (Eq. 15) or both."""
    make_strategy, make_download = method.make_strategy, method.make_download
    changes = {}
    if mode in ("upload", "both"):
        changes["make_strategy"] = lambda config: NoisyAggregate(make_strategy(config), beta)
    if mode in ("download", "both"):
        def noisy_download(config):
            inner = make_download(config) if make_download else None

            def download(global_state, client, memory, round_index):
                received = inner(global_state, client, memory, round_index) if inner else global_state
                return add_white_noise(received, beta)

            return download

        changes["make_download"] = noisy_download
    return dataclasses.replace(method, **changes)
