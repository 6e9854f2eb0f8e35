"""Client-level differential privacy: DP-FedAvg (McMahan, Ramage, Talwar & Zhang, "Learning Differentially
Private Recurrent Language Models", ICLR 2018, Algorithm 1 with the fixed-denominator estimator).

``--client-dp --clip S --noise-multiplier Z`` replaces the method's server
aggregation (:func:`with_client_dp`):

    Delta_k = clip_S(w_k - w)            every floating shared tensor, one joint L2 norm
    w'      = w + (1/m) sum_k Delta_k + N(0, (Z S / m)^2)

over the ``m`` clients sampled this round, ``w`` the server's global state.
Adding or removing one client changes the sum by at most ``S``, so the mean
has sensitivity ``S / m`` and the noise is the Gaussian mechanism with
multiplier ``Z``.  Integer buffers (BatchNorm's ``num_batches_tracked``)
keep the server's value: they are counters, and averaging them would leak
data sizes.  BatchNorm running statistics are floating shared tensors, so
they are clipped and noised with the rest; a noisy ``running_var`` is then
clamped at 0 (post-processing, no privacy cost), else BatchNorm would take
the square root of a negative variance.

Accounting (:class:`~privreid.defenses.PrivacyLedger`): ``q = m / N``
per round over the rounds run, Opacus RDP (:mod:`.accounting`).  privreid
samples exactly ``m`` of the ``N`` clients a round; the Poisson-sampling
analysis with ``q = m / N`` is the approximation DP-FedAvg and TensorFlow
Privacy use for this setting, stated in the run's privacy summary.

Aggregation weights.  The sensitivity argument needs every client to
enter the mean with weight ``1/m``.  Methods whose server averages with
data-volume weights (fedpav, fedavg, fedprox, fedbn, moon) therefore
aggregate with uniform weights under client DP (the summary notes it);
methods whose aggregation reads per-client quantities that are neither
clipped nor noised, or that runs each upload on its own, are refused:
CDW and KS weights (from client-reported scalars), KD (soft labels from each
upload), CC (clusters of individual uploads), DPPT (class centres), and the
non-federated baselines (nothing is shared).

Threat model: central DP with a trusted aggregator.  The server sees the
individual clipped updates; the guarantee covers the sequence of noisy
global models it releases (downloads, checkpoints), not the server's own
view.  Noise comes from the seeded torch RNG (reproducible, not
cryptographically secure).
"""

from __future__ import annotations

import dataclasses

import torch

from ..config import RunConfig
from ..errors import ConfigError
from ..federated.policy import StateDict
from ..federated.registry import Method
from ..federated.strategy import DataVolumeAverage, Strategy, UniformAverage, Upload

#: inner strategies client DP may replace: plain (weighted) means of the uploads
REPLACEABLE = (DataVolumeAverage, UniformAverage)


def update_norm(update: StateDict) -> float:
    """Joint L2 norm of the floating tensors of ``update`` (float64)."""
    return float(torch.sqrt(sum((v.double().pow(2).sum() for v in update.values() if torch.is_floating_point(v)),
                                torch.zeros((), dtype=torch.float64))))


def clip_update(update: StateDict, bound: float) -> StateDict:
    """``update * min(1, S / ||update||)`` (floating tensors; the joint norm is at most ``bound`` afterwards)."""
    norm = update_norm(update)
    scale = min(1.0, bound / norm) if norm > 0 else 1.0
    return {k: v * scale if torch.is_floating_point(v) else v for k, v in update.items()}


class ClientLevelDP(Strategy):
    """DP-FedAvg's server step: global + mean of clipped client updates + Gaussian noise (see the module docstring)."""

    def __init__(self, clip: float, noise_multiplier: float):
        if clip <= 0 or noise_multiplier <= 0:
            raise ConfigError(f"client-level DP needs clip > 0 and noise_multiplier > 0 (got {clip}, "
                              f"{noise_multiplier})")
        self.clip, self.noise_multiplier = float(clip), float(noise_multiplier)

    def noise_std(self, m: int) -> float:
        """``Z S / m``: the standard deviation of the noise on the mean of ``m`` updates."""
        return self.noise_multiplier * self.clip / m

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> StateDict:
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        for u in uploads:
            if u.state.keys() != global_state.keys():
                raise ValueError(f"client {u.client} uploaded keys that differ from the global state")
        floating = [k for k, v in global_state.items() if torch.is_floating_point(v)]
        m = len(uploads)
        total = {k: torch.zeros_like(global_state[k], dtype=torch.float64) for k in floating}
        for u in uploads:
            clipped = clip_update({k: u.state[k].double() - global_state[k].double() for k in floating}, self.clip)
            for k in floating:
                total[k] += clipped[k]
        std = self.noise_std(m)
        out: StateDict = {}
        for k, v in global_state.items():
            if k in total:
                noise = torch.randn(v.shape, dtype=torch.float64) * std
                out[k] = (v.double() + total[k] / m + noise.to(v.device)).to(v.dtype)
                if k.rpartition(".")[2] == "running_var":
                    out[k].clamp_(min=0.0)
            else:
                out[k] = v.clone()
        return out


def with_client_dp(method: Method) -> Method:
    """``method`` with DP-FedAvg aggregation; ConfigError for methods whose aggregation cannot keep the guarantee."""
    if not method.communicates or not method.has_global_model:
        raise ConfigError(f"--client-dp needs a federated method; {method.name!r} shares no model between clients")
    make_strategy = method.make_strategy

    def strategy(config: RunConfig) -> Strategy:
        inner = make_strategy(config)
        if type(inner) not in REPLACEABLE:
            raise ConfigError(f"--client-dp replaces the server aggregation by a clipped uniform mean with noise; "
                              f"{method.name!r} aggregates with {type(inner).__name__}, which reads each client's "
                              f"upload or reported scalars unclipped and un-noised, so no client-level guarantee "
                              f"would hold")
        t = config.train
        return ClientLevelDP(t.clip, t.noise_multiplier)

    return dataclasses.replace(method, make_strategy=strategy)
