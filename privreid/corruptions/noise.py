"""ImageNet-C noise corruptions: gaussian, shot (Poisson), impulse (salt and pepper), speckle (Hendrycks &
Dietterich, ICLR 2019; ``imagecorruptions``). Drawn per pixel and channel at the image's own resolution, so the
pixel scale does not apply (fewer pixels are not less noisy per pixel)."""

from __future__ import annotations

import torch

from privreid.corruptions.common import Context

GAUSSIAN_NOISE_STD = (0.08, 0.12, 0.18, 0.26, 0.38)
SHOT_NOISE_PHOTONS = (60, 25, 12, 5, 3)
IMPULSE_NOISE_AMOUNT = (0.03, 0.06, 0.09, 0.17, 0.27)
SPECKLE_NOISE_STD = (0.15, 0.2, 0.35, 0.45, 0.6)


def gaussian_noise(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """``x + N(0, c^2)`` per pixel and channel."""
    return x + ctx.normal(x.shape, x, std=GAUSSIAN_NOISE_STD[severity - 1])


def shot_noise(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """``Poisson(c * x) / c``: photon noise with ``c`` photons at full intensity."""
    c = SHOT_NOISE_PHOTONS[severity - 1]
    return ctx.poisson(x * c) / c


def impulse_noise(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """Salt and pepper as scikit-image's ``random_noise(mode="s&p")``: one uniform ``u`` per value, ``u < amount
    / 2`` salt (1), ``amount / 2 <= u < amount`` pepper (0)."""
    amount = IMPULSE_NOISE_AMOUNT[severity - 1]
    u = ctx.uniform(x.shape, x)
    return torch.where(u < amount, (u < amount / 2).to(x.dtype), x)


def speckle_noise(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """Multiplicative noise ``x + x * N(0, c^2)``."""
    return x + x * ctx.normal(x.shape, x, std=SPECKLE_NOISE_STD[severity - 1])
