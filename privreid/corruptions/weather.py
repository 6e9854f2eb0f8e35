"""Weather corruptions: ImageNet-C's snow, frost and fog (Hendrycks & Dietterich, ICLR 2019; ``imagecorruptions``)
and CIL-ReID's rain (Chen et al., NeurIPS 2021 D&B: albumentations' ``RandomRain``, box blur ``2 + severity``,
brightness ``-(0.05 + 0.05 * severity)``). Pixel lengths are scaled (:mod:`privreid.corruptions.common`).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from privreid.corruptions.common import Context, luma
from privreid.corruptions.frost_texture import NUM_TEXTURES, TEXTURE_SIDE, frost_texture
from privreid.corruptions.kernels import batch_kernel_filter, box_blur, streak_kernel

#: (flake mean, flake std, flake size px, threshold, streak radius px, streak sigma px, image weight)
SNOW = ((0.1, 0.3, 3, 0.5, 10, 4, 0.8),
        (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
        (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
        (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
        (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55))
SNOW_ANGLES = (-135.0, -45.0)
#: (image weight, frost weight)
FROST = ((1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75))
#: ImageNet-C enlarges the frost photograph by this factor before its random crop.
FROST_ENLARGE = 1.1
#: (fog strength, wibble decay of the plasma fractal)
FOG = ((1.5, 2.0), (2.0, 2.0), (2.5, 1.7), (2.5, 1.5), (3.0, 1.4))
#: (pixels per drop, drop length px, box-blur size px, brightness shift); drizzle, heavy x2, torrential x2
RAIN = ((770, 10, 3, -0.10), (600, 30, 4, -0.15), (600, 30, 5, -0.20), (500, 60, 6, -0.25), (500, 60, 7, -0.30))
RAIN_SLANT = 10          # px, albumentations' slant range [-10, 10]


def snow(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """Flakes (thresholded Gaussian noise on ``size * pixel_scale`` px cells, resized bilinearly: ImageNet-C's
    zoom by the flake size) streaked by a falling motion blur; the layer and its 180-degree rotation are added to
    ``w * x + (1 - w) * max(x, 1.5 * grey(x) + 0.5)``."""
    mean, std, size, threshold, radius, sigma, weight = SNOW[severity - 1]
    b, _, h, w = x.shape
    cell = ctx.px(size)
    grid = ctx.normal((b, 1, max(1, math.ceil(h / cell)), max(1, math.ceil(w / cell))), x, mean, std)
    layer = F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=False)
    layer = torch.where(layer < threshold, torch.zeros_like(layer), layer).clamp(0, 1)
    angles = ctx.uniform((b,), x, *SNOW_ANGLES)
    layer = batch_kernel_filter(layer, streak_kernel(ctx.px(radius), ctx.px(sigma), angles), "replicate")
    layer = torch.round(layer * 255) / 255
    whitened = weight * x + (1 - weight) * torch.maximum(x, luma(x) * 1.5 + 0.5)
    return whitened + layer + layer.flip(-2, -1)


@functools.lru_cache(maxsize=16)
def _frost_bank(side: int) -> torch.Tensor:
    """All frost textures resized to ``side`` px: ``(NUM_TEXTURES, 3, side, side)`` on the CPU."""
    bank = torch.stack([frost_texture(i) for i in range(NUM_TEXTURES)])
    if side == TEXTURE_SIDE:
        return bank
    return F.interpolate(bank, size=(side, side), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)


def frost(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """``a * x + b * crop(texture)``: a random texture (:mod:`~privreid.corruptions.frost_texture`) and crop per
    image, the texture (``TEXTURE_SIDE * s`` px) enlarged to cover the image, then by 1.1, as ImageNet-C."""
    a, weight = FROST[severity - 1]
    b, _, h, w = x.shape
    scale = ctx.pixel_scale * max(1.0, h / (TEXTURE_SIDE * ctx.pixel_scale), w / (TEXTURE_SIDE * ctx.pixel_scale))
    side = max(h, w, math.ceil(TEXTURE_SIDE * scale * FROST_ENLARGE))
    bank = _frost_bank(side).to(x.device, x.dtype)
    index = ctx.integers(0, NUM_TEXTURES, (b,), x).tolist()
    top = ctx.integers(0, side - h + 1, (b,), x).tolist()
    left = ctx.integers(0, side - w + 1, (b,), x).tolist()
    texture = torch.stack([bank[i, :, y:y + h, z:z + w] for i, y, z in zip(index, top, left)])
    return a * x + weight * texture


def plasma_fractal(count: int, size: int, decay: float, ctx: Context) -> torch.Tensor:
    """ImageNet-C's plasma fractal: ``count`` maps ``(count, size, size)`` in [0, 1], ``size`` a power of two.

    Diamond-square on a torus from a zero corner: per level, every square then diamond centre becomes its four
    neighbours' mean plus ``a * U(-a, a)`` (``a`` 100, divided by ``decay`` per level); each map is rescaled to
    [0, 1]. Float64, on the generator's device.
    """
    if size < 1 or size & (size - 1):
        raise ValueError(f"plasma fractal size must be a power of two, got {size}")
    maps = torch.zeros(count, size, size, dtype=torch.float64, device=ctx.generator.device)
    step, amplitude = size, 100.0

    def noisy_mean(total: torch.Tensor) -> torch.Tensor:
        return total / 4 + amplitude * ctx.uniform(total.shape, total, -amplitude, amplitude)

    while step >= 2:
        half = step // 2
        corners = maps[:, ::step, ::step]
        square = corners + corners.roll(-1, 1)
        maps[:, half::step, half::step] = noisy_mean(square + square.roll(-1, 2))
        centres = maps[:, half::step, half::step]
        # diamonds on the corner rows (between two corners, between two centres), then on the corner columns
        maps[:, ::step, half::step] = noisy_mean(centres + centres.roll(1, 1) + corners + corners.roll(-1, 2))
        maps[:, half::step, ::step] = noisy_mean(centres + centres.roll(1, 2) + corners + corners.roll(-1, 1))
        step, amplitude = half, amplitude / decay
    low = maps.amin(dim=(1, 2), keepdim=True)
    return (maps - low) / (maps.amax(dim=(1, 2), keepdim=True) - low)


def fog(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """``(x + c * plasma) * m / (m + c)``, ``m`` the image's maximum: the fractal (:func:`plasma_fractal`) at the
    next power of two of the longer side, its top-left corner used (``imagecorruptions``); at pixel scale ``s``
    made for the reference image and resized (antialiased), so blobs keep their size. Not kornia's
    ``diamond_square`` (it mixes the noise in by a weight: fog 5-12 % weaker at severities 4-5)."""
    strength, decay = FOG[severity - 1]
    b, _, h, w = x.shape
    ref_h, ref_w = (max(1, math.ceil(n / ctx.pixel_scale - 1e-9)) for n in (h, w))
    size = 1 << (max(ref_h, ref_w) - 1).bit_length()
    plasma = plasma_fractal(b, size, decay, ctx)[:, None, :ref_h, :ref_w]
    if (ref_h, ref_w) != (h, w):
        plasma = F.interpolate(plasma, size=(h, w), mode="bilinear", antialias=True, align_corners=False)
    plasma = plasma.to(x.device, x.dtype)
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    return (x + strength * plasma) * peak / (peak + strength)


def rain(x: torch.Tensor, severity: int, ctx: Context) -> torch.Tensor:
    """CIL-ReID's rain: 1-pixel drops of value 200/255, a box blur of the whole image, then darkening.

    Drops by kornia's ``RandomRain`` (albumentations' model: one slant per image in ``[-10, 10]`` px); length,
    slant and blur are scaled, the drop count keeps the density per reference pixel (``H * W / (pixels_per_drop
    * s^2)``). Its sampler reads torch's global generator, so it runs in ``fork_rng`` seeded from this call's.
    """
    import kornia

    per_drop, length, blur, shift = RAIN[severity - 1]
    b, _, h, w = x.shape
    s = ctx.pixel_scale
    drops = round(h * w / (per_drop * s * s))
    length = min(h - 1, max(1, round(length * s)))
    slant = min(w - 1, round(RAIN_SLANT * s))
    out = x
    if drops > 0 and length >= 1:
        add_rain = kornia.augmentation.RandomRain(number_of_drops=(drops, drops), drop_height=(length, length),
                                                  drop_width=(-slant, slant), p=1.0)
        devices = [x.device] if x.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(ctx.seed())
            out = add_rain(x)
    return box_blur(out, max(1, round(blur * s))) + shift
