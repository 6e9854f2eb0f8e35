"""What every corruption function receives: the random source and the pixel scale.

Pixel scale: ImageNet-C (Hendrycks & Dietterich, ICLR 2019) gives blur radii, correlation lengths, streak
lengths and texture sizes in pixels of a 224x224 image. An ``H x W`` image is treated as a downscaled scene:
with scale ``s`` the reference image is ``(H / s) x (W / s)`` and every pixel length is multiplied by ``s``.
``pixel_scale=1`` (the default) takes the tables literally, as CIL-ReID (Chen et al., NeurIPS 2021 D&B) ran
``imagecorruptions`` on Market-1501's 128x64 crops: the only setting comparable with CIL-ReID.
``pixel_scale="auto"`` is ``s = sqrt(H * W) / 224`` (0.40 at 128x64, 0.81 at 256x128): a *scaled* variant
(milder on small crops), labelled as such in reports and listed as a deviation. Non-length parameters (noise
strengths, contrast, JPEG quality, zoom factors, pixelation ratios, fog severities) are used as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from privreid.errors import ConfigError

#: Side of the square images that ImageNet-C's pixel parameters were chosen for.
REFERENCE_SIDE = 224


def resolve_pixel_scale(pixel_scale: float | str, height: int, width: int) -> float:
    """``"auto"`` -> ``sqrt(height * width) / 224``; a positive number is returned as is."""
    if isinstance(pixel_scale, str):
        if pixel_scale != "auto":
            raise ConfigError(f"pixel_scale must be 'auto' or a positive number, got {pixel_scale!r}")
        return math.sqrt(height * width) / REFERENCE_SIDE
    if isinstance(pixel_scale, bool) or not isinstance(pixel_scale, (int, float)) or not (
            math.isfinite(pixel_scale) and pixel_scale > 0):
        raise ConfigError(f"pixel_scale must be 'auto' or a positive number, got {pixel_scale!r}")
    return float(pixel_scale)


def make_generator(generator: torch.Generator | int | None) -> torch.Generator:
    """A ``torch.Generator`` from a generator, an integer seed (a new CPU generator) or ``None`` (torch's own)."""
    if generator is None:
        return torch.default_generator
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, int) or generator < 0:
        raise ConfigError(f"generator must be a torch.Generator, a non-negative integer seed or None, "
                          f"got {generator!r}")
    return torch.Generator().manual_seed(generator)


@dataclass(frozen=True)
class Context:
    """Random draws and the pixel scale of one :func:`privreid.corruptions.corrupt` call; draws are made on the
    generator's device in float32, then moved, so a seed draws the same numbers on any device."""

    generator: torch.Generator
    pixel_scale: float

    def px(self, length: float) -> float:
        """A length in ImageNet-C (224x224) pixels, in pixels of this image."""
        return length * self.pixel_scale

    def uniform(self, shape, like: torch.Tensor, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        u = torch.rand(shape, generator=self.generator, device=self.generator.device)
        return (low + (high - low) * u).to(like.device, like.dtype)

    def normal(self, shape, like: torch.Tensor, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        z = torch.randn(shape, generator=self.generator, device=self.generator.device)
        return (mean + std * z).to(like.device, like.dtype)

    def integers(self, low: int, high: int, shape, like: torch.Tensor) -> torch.Tensor:
        """Integers uniform in ``[low, high)`` (numpy's ``randint`` convention), as int64 on ``like``'s device."""
        return torch.randint(low, high, shape, generator=self.generator,
                             device=self.generator.device).to(like.device)

    def poisson(self, rate: torch.Tensor) -> torch.Tensor:
        out = torch.poisson(rate.to(self.generator.device, torch.float32), generator=self.generator)
        return out.to(rate.device, rate.dtype)

    def seed(self) -> int:
        """A 63-bit seed drawn from the generator, for library code that only reads torch's global RNG."""
        return int(torch.randint(0, 2**63 - 1, (1,), generator=self.generator, device=self.generator.device))


def luma(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 grey level ``(B, 1, H, W)`` of RGB images, as OpenCV's ``COLOR_RGB2GRAY`` (kornia's weights)."""
    import kornia

    return kornia.color.rgb_to_grayscale(x)
