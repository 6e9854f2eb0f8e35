"""Client-level differential privacy: DP-FedAvg (McMahan, Ramage, Talwar & Zhang, "Learning Differentially
Private Recurrent Language Models", ICLR 2018, Algorithm 1 with the fixed-denominator estimator).

``--client-dp --clip S --noise-multiplier Z`` replaces the method's server aggregation (:func:`with_client_dp`):

    Delta_k = clip_S(theta_k - theta)    the shared trainable parameters, one joint L2 norm
    theta'  = theta + (1/m) sum_k Delta_k + N(0, (Z S / m)^2)

over the ``m`` clients sampled this round, ``theta`` the server's global parameters.  Adding or removing one client
changes the sum by at most ``S``, so the mean has sensitivity ``S / m`` and the noise is the Gaussian mechanism with
multiplier ``Z``.

What the mechanism privatises: the model's **trainable parameters** (``requires_grad``,
:func:`trainable_parameter_names`), the ``theta`` of Algorithm 1 and what FLSim's user-update clipper clips
(``model.parameters()``).  Every other shared entry keeps the server's value and is never computed from the uploads:
BatchNorm's running statistics, its integer ``num_batches_tracked``, and frozen tensors (BNNeck's zero bias).  The
running statistics are statistics of the clients' data, so averaging them un-noised would leak outside the
guarantee; clipping and noising them with the parameters fails instead: their per-round changes are orders of
magnitude larger than the parameters' (a running variance follows the activations' scale), so they take the whole
clipping budget and starve the parameter update, and noise of std ``Z S / m`` on a variance drives it to or below
zero, where BatchNorm divides by ``sqrt(eps)``; over a few layers the global model's features overflow to inf/NaN.
The global model therefore evaluates with the server's initial statistics (ImageNet's for a pretrained trunk), which
costs accuracy and no privacy.  Clients still download them and re-estimate their own in local training; the ledger
states the choice.  Where ``Z S / m`` is as large as the weights themselves (few clients, small ``S``), the noise on
the weights alone still makes the global model's eval-mode activations grow layer by layer and round by round, until
its evaluation stops with a float32 overflow error: the model is destroyed by the noise, as the accounting allows,
not by a numerical fault.

Accounting (:class:`~privreid.defenses.PrivacyLedger`): ``q = m / N`` per round over the rounds run, Opacus RDP
(:mod:`.accounting`).  privreid samples exactly ``m`` of the ``N`` clients a round; the Poisson-sampling analysis
with ``q = m / N`` is the approximation DP-FedAvg and TensorFlow Privacy use for this setting, stated in the run's
privacy summary.

Aggregation weights.  The sensitivity argument needs every client to enter the mean with weight ``1/m``: methods that
average with data-volume weights (fedpav, fedavg, fedprox, fedbn, moon) aggregate with uniform weights under client
DP (the summary notes it); methods whose aggregation reads per-client quantities that are neither clipped nor noised,
or runs each upload on its own, are refused: CDW and KS weights (client-reported scalars), KD (soft labels from each
upload), CC (clusters of individual uploads), DPPT (class centres), and the non-federated baselines (nothing shared).

Threat model: central DP with a trusted aggregator.  The server sees the individual clipped updates; the guarantee
covers the sequence of noisy global models it releases (downloads, checkpoints), not the server's own view.  Noise
comes from the seeded torch RNG (reproducible, not cryptographically secure).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from privreid.config import RunConfig
from privreid.errors import ConfigError
from privreid.federated.policy import StateDict
from privreid.federated.registry import Method
from privreid.federated.strategy import (Accumulator, DataVolumeAverage, RoundResult, Strategy, UniformAverage, Upload,
                                  uniform)

#: inner strategies client DP may replace: plain (weighted) means of the uploads
REPLACEABLE = (DataVolumeAverage, UniformAverage)

#: what the privacy ledger says about the privatised update (see the module docstring)
PRIVATISED_NOTE = ("client-level DP: only trainable parameters are clipped, averaged and noised; BatchNorm running "
                   "statistics and other buffers are not aggregated and keep the server's initial values, so the "
                   "released global models carry no client statistics")


def update_norm(update: StateDict) -> float:
    """Joint L2 norm of the floating tensors of ``update`` (float64)."""
    return float(torch.sqrt(sum((v.double().pow(2).sum() for v in update.values() if torch.is_floating_point(v)),
                                torch.zeros((), dtype=torch.float64))))


def clip_update(update: StateDict, bound: float) -> StateDict:
    """``update * min(1, S / ||update||)`` (floating tensors; the joint norm is at most ``bound`` afterwards)."""
    norm = update_norm(update)
    scale = min(1.0, bound / norm) if norm > 0 else 1.0
    return {k: v * scale if torch.is_floating_point(v) else v for k, v in update.items()}


def trainable_parameter_names(method: Method, config: RunConfig) -> frozenset[str]:
    """Names of the trainable parameters (``requires_grad``) of the model the engine builds for ``method``.

    Built without initial weights (they change no name or flag) and with the
    global RNG forked, so the run's random stream is untouched.
    """
    with torch.random.fork_rng(devices=[]):
        model = method.build_model(config, initial_weights=False)
    return frozenset(name for name, p in model.named_parameters() if p.requires_grad)


class ClientLevelDP(Strategy):
    """DP-FedAvg's server step on the trainable parameters (see the module docstring).

    Args:
        clip: ``S``, the L2 bound of a client's update.
        noise_multiplier: ``Z``.
        trainable: the keys the mechanism privatises (:func:`trainable_parameter_names`); every other
            key of the global state keeps the server's value.
    """

    def __init__(self, clip: float, noise_multiplier: float, trainable: Iterable[str]):
        if clip <= 0 or noise_multiplier <= 0:
            raise ConfigError(f"client-level DP needs clip > 0 and noise_multiplier > 0 (got {clip}, "
                              f"{noise_multiplier})")
        self.clip, self.noise_multiplier = float(clip), float(noise_multiplier)
        self.trainable = frozenset(trainable)

    def noise_std(self, m: int) -> float:
        """``Z S / m``: the standard deviation of the noise on the mean of ``m`` updates."""
        return self.noise_multiplier * self.clip / m

    def upload_weight(self) -> Callable[[Upload], float]:
        """DP-FedAvg's server mean is unweighted (whatever the strategy it replaces)."""
        return uniform

    def accumulator(self, global_state: StateDict) -> Accumulator:
        """Streams: each upload's update is clipped and summed as it arrives; the noise goes on the mean."""
        return _ClippedSum(self, global_state)


class _ClippedSum(Accumulator):
    """``sum_k clip_S(theta_k - theta)`` over the trainable keys, in float64; ``result`` is the noisy mean."""

    def __init__(self, strategy: ClientLevelDP, global_state: StateDict):
        self.strategy, self.global_state = strategy, global_state
        self.private = [k for k in global_state if k in strategy.trainable]
        for k in self.private:
            if not torch.is_floating_point(global_state[k]):
                raise ValueError(f"trainable key {k} is not a floating tensor")
        self.total = {k: torch.zeros_like(global_state[k], dtype=torch.float64) for k in self.private}
        self.m = 0

    def add(self, upload: Upload) -> None:
        g = self.global_state
        if upload.state.keys() != g.keys():
            raise ValueError(f"client {upload.client} uploaded keys that differ from the global state")
        clipped = clip_update({k: upload.state[k].double() - g[k].double() for k in self.private},
                              self.strategy.clip)
        for k in self.private:
            self.total[k] += clipped[k]
        self.m += 1

    def result(self) -> RoundResult:
        if self.m == 0:
            raise ValueError("cannot aggregate zero uploads")
        std = self.strategy.noise_std(self.m)
        out: StateDict = {}
        for k, v in self.global_state.items():
            if k in self.total:
                noise = torch.randn(v.shape, dtype=torch.float64) * std
                out[k] = (v.double() + self.total[k] / self.m + noise.to(v.device)).to(v.dtype)
            else:
                out[k] = v.clone()
        return RoundResult(out)


def with_client_dp(method: Method) -> Method:
    """``method`` with DP-FedAvg aggregation; ConfigError for methods whose aggregation cannot keep the guarantee."""
    if not method.communicates or not method.has_global_model:
        raise ConfigError(f"--client-dp needs a federated method; {method.name!r} shares no model between clients")
    make_strategy = method.make_strategy

    def strategy(config: RunConfig, model_config: dict[str, Any]) -> Strategy:
        inner = make_strategy(config, model_config)
        if type(inner) not in REPLACEABLE:
            raise ConfigError(f"--client-dp replaces the server aggregation by a clipped uniform mean with noise; "
                              f"{method.name!r} aggregates with {type(inner).__name__}, which reads each client's "
                              f"upload or reported scalars unclipped and un-noised, so no client-level guarantee "
                              f"would hold")
        return ClientLevelDP(config.privacy.clip, config.privacy.noise_multiplier, trainable_parameter_names(method, config))

    return dataclasses.replace(method, make_strategy=strategy)
