"""The training-time defenses, applied to what the attacker observes.

* **White noise** (FedReID, Wu & Gong, paper 002, Eq. 14 / 15), as
  :func:`privreid.defenses.beta_noise.mechanism.add_white_noise`: ``beta * N(0, 1)`` on every floating tensor.
  - *upload* (Eq. 14): on the observed gradient. Deviation: Eq. 14 noises the aggregate (privreid's training
    adds it at the server), which hides nothing from a server reading each upload; the paper's aim is
    protection from inversion, so privreid evaluates noise on each upload. Units: Eq. 14 adds ``beta`` to
    parameters (a one-step update at lr ``eta`` reveals the gradient with noise ``beta / eta``); privreid adds
    ``beta`` to the gradient, less noise for ``eta < 1``: it favours the attacker, never the defense.
  - *download* (Eq. 15): the client trains from the received model plus noise (:func:`noisy_download`), on
    parameters only (the one-image eval-mode step could get a negative running variance).
* **DP clipping and Gaussian noise**: the observed gradient, as one vector, scaled to L2 norm at most
  ``clip_norm``, then ``N(0, (noise_multiplier * clip_norm)^2)`` per coordinate.
  - Record-level DP-SGD (Abadi et al. 2016, Alg. 1) clips each example and noises the batch sum on the
    client: relative to one example's clipped gradient the std is ``noise_multiplier * clip_norm`` whatever
    the batch size.
  - Client-level DP-FedAvg (McMahan et al. 2018): the *server* noises the aggregate, so it sees the clipped
    update without noise (``noise_multiplier = 0``); the bound here clips the gradient rather than the
    update, which only changes the scale (irrelevant to cosine matching).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from privreid.defenses.beta_noise.mechanism import add_white_noise
from privreid.errors import ConfigError

Gradients = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Defense:
    """The defenses in force: upload noise ``beta``, download noise, DP clip and noise multiplier."""

    beta: float = 0.0
    download_beta: float = 0.0
    clip_norm: float | None = None
    noise_multiplier: float = 0.0

    @property
    def active(self) -> bool:
        return self.beta > 0 or self.download_beta > 0 or self.clip_norm is not None or self.noise_multiplier > 0


NO_DEFENSE = Defense()


def _white_noise(tensors: Gradients, beta: float, generator: torch.Generator | None) -> Gradients:
    """``add_white_noise`` with its global-RNG draws seeded from ``generator`` (global RNG state untouched)."""
    devices = sorted({t.device.index or 0 for t in tensors.values() if t.is_cuda})
    with torch.random.fork_rng(devices=devices):
        if generator is not None:
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
        return add_white_noise(tensors, beta)


def defend_gradient(grads: Gradients, *, beta: float = 0.0, clip_norm: float | None = None,
                    noise_multiplier: float = 0.0, generator: torch.Generator | None = None) -> Gradients:
    """What leaves the client: ``grads`` clipped to ``clip_norm`` (``None``: no clipping), plus DP noise of std
    ``noise_multiplier * clip_norm``, plus white noise of std ``beta`` (Eq. 14, gradient units); new tensors,
    every draw from ``generator``."""
    if beta < 0 or noise_multiplier < 0:
        raise ConfigError(f"beta and noise_multiplier must be >= 0 (got {beta}, {noise_multiplier})")
    if clip_norm is not None and clip_norm <= 0:
        raise ConfigError(f"clip_norm must be > 0 (got {clip_norm})")
    if noise_multiplier > 0 and clip_norm is None:
        raise ConfigError("DP noise needs a clip norm: noise_multiplier is relative to clip_norm")
    out = {k: v.detach().clone() for k, v in grads.items()}
    if clip_norm is not None:
        norm = torch.sqrt(sum((v.double() ** 2).sum() for v in out.values()))
        scale = min(1.0, clip_norm / (float(norm) + 1e-12))
        out = {k: v * scale for k, v in out.items()}
        if noise_multiplier > 0:
            std = noise_multiplier * clip_norm
            out = {k: v + std * torch.randn(v.shape, generator=generator, dtype=v.dtype).to(v.device)
                   for k, v in out.items()}
    if beta > 0:
        out = _white_noise(out, beta, generator)
    return out


def noisy_download(model: torch.nn.Module, shared: set[str], beta: float,
                   generator: torch.Generator | None = None) -> torch.nn.Module:
    """A copy of ``model`` whose shared parameters carry Eq. 15's ``beta * N(0, 1)`` (the victim's model)."""
    victim = copy.deepcopy(model)
    if beta <= 0:
        return victim
    params = {n: p.detach() for n, p in victim.named_parameters() if n in shared}
    noisy = _white_noise(params, beta, generator)
    with torch.no_grad():
        for name, p in victim.named_parameters():
            if name in noisy:
                p.copy_(noisy[name])
    return victim


def defense_as_trained(config, aggregated: int | None = None) -> Defense:
    """What the attacker's observation carries under the defenses of a run's :class:`privreid.config.RunConfig`,
    each stating its assumption (:meth:`privreid.defenses.registry.Defense.threat_assumption`): DP-SGD its
    bound C and ``--noise-multiplier`` (with ``--target-epsilon`` the noise lives in the client memory, so the
    attack sees the clipped gradient without noise, an upper bound on leakage); client-level DP its clip and the
    view's noise (each client's distributed share when the attacker sees ``aggregated`` uploads); beta noise
    its scales.
    """
    from privreid.defenses.registry import enabled_defenses

    fields: dict = {}
    for defense in enabled_defenses(config):
        fields.update(defense.threat_assumption(config, aggregated))
    return Defense(**fields)


