"""FedReID's white-noise privacy protection (Wu & Gong, paper 002).

* upload (Eq. 14): the server adds ``beta * N(0, 1)`` to the aggregate, ``theta <- 1/|C N| sum_m omega_m + beta
  N(0, 1)``, hiding the contributions of the selected clients;
* download (Eq. 15): a client adds ``beta * N(0, 1)`` to the model it starts local training from,
  ``{1/2 (theta + omega^f), omega^c} + beta N(0, 1)`` for FedReID (after its half-average, Eq. 8; mapping network
  included), the received model with its local keys for every other method.  What the server transmits stays
  noise-free: FedReID's server copy (Eq. 12) and FedProx's anchor are the received theta;
* both: single vs double protection of the paper's Fig. 3.

Noise goes on the model's **trainable parameters only** (the paper's "weights of neurons"), those SGD trains.
Buffers (BatchNorm running statistics, ``num_batches_tracked``), frozen parameters and server-side method state
(DPPT's class centres) are transmitted and kept noise-free: a noisy ``running_var`` turns negative at beta of the
order of the variances, and the features become NaN.

There is no formal guarantee: the updates are not clipped, so no epsilon can be claimed (the run summary says so).
Noise is drawn from the torch RNG, which the engine seeds per round (server) and per client (client start), so noisy
runs stay deterministic and resumable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

import torch

from privreid.federated.policy import StateDict
from privreid.federated.registry import Method
from privreid.federated.strategy import Accumulator, RoundResult, Strategy, Upload
from privreid.defenses.client_dp.mechanism import trainable_parameter_names


def add_white_noise(state: StateDict, beta: float, keys: Collection[str] | None = None) -> StateDict:
    """``state + beta * N(0, 1)`` on the floating tensors named in ``keys`` (new tensors; input untouched).

    ``keys=None`` noises every floating tensor (a gradient dict); tensors
    outside ``keys`` and integer tensors are copied unchanged.
    """
    return {k: v + beta * torch.randn_like(v) if torch.is_floating_point(v) and (keys is None or k in keys)
            else v.clone() for k, v in state.items()}


class NoisyAggregate(Strategy):
    """Eq. 14: the inner strategy's aggregate plus white noise on the trainable parameters ``parameters``.

    Streams when the inner strategy does: the uploads go to the inner
    accumulator as they arrive, the noise is added to its global state (not to
    its per-client server state).  What clients receive is the inner
    strategy's ``configure``.
    """

    def __init__(self, inner: Strategy, beta: float, parameters: Collection[str]):
        self.inner, self.beta, self.parameters = inner, beta, frozenset(parameters)

    def configure(self, global_state, client, client_server_state, round_index):
        return self.inner.configure(global_state, client, client_server_state, round_index)

    def upload_weight(self):
        """The inner strategy's: the noise goes on its mean."""
        return self.inner.upload_weight()

    def accumulator(self, global_state: StateDict) -> Accumulator:
        return _NoisyResult(self.inner.accumulator(global_state), self.beta, self.parameters)


class _NoisyResult(Accumulator):
    def __init__(self, inner: Accumulator, beta: float, parameters: frozenset[str]):
        self.inner, self.beta, self.parameters = inner, beta, parameters

    def add(self, upload: Upload) -> None:
        self.inner.add(upload)

    def result(self) -> RoundResult:
        inner = self.inner.result()
        return dataclasses.replace(inner, global_state=add_white_noise(inner.global_state, self.beta, self.parameters))


class NoisyStart:
    """Eq. 15: the client's start model (after the inner client start) plus white noise on its trainable parameters."""

    def __init__(self, inner: Callable | None, beta: float):
        self.inner, self.beta = inner, beta

    def __call__(self, ctx) -> None:
        if self.inner is not None:
            self.inner(ctx)
        with torch.no_grad():
            for p in ctx.model.parameters():
                if p.requires_grad:
                    p.add_(self.beta * torch.randn_like(p))


def with_beta_noise(method: Method, beta: float, mode: str) -> Method:
    """``method`` with white noise on upload (Eq. 14), download (Eq. 15) or both."""
    make_strategy, make_start = method.make_strategy, method.make_client_start
    changes = {}
    if mode in ("upload", "both"):
        changes["make_strategy"] = lambda config, model_config: NoisyAggregate(
            make_strategy(config, model_config), beta, trainable_parameter_names(method, config))
    if mode in ("download", "both"):
        changes["make_client_start"] = lambda config: NoisyStart(make_start(config) if make_start else None, beta)
    return dataclasses.replace(method, **changes)
