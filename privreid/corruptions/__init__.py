"""Image corruptions of CIL-ReID (Chen et al., "Benchmarks for Corruption Invariant Person
Re-identification", NeurIPS 2021 D&B): the 19 ImageNet-C types (Hendrycks & Dietterich, ICLR
2019) plus rain, at severities 1-5, on batched tensors.

>>> import torch
>>> from privreid.corruptions import corrupt
>>> images = torch.rand(8, 3, 128, 64)              # (B, 3, H, W) in [0, 1]
>>> foggy = corrupt(images, "fog", 3, generator=0)  # same shape and dtype, in [0, 1]

Whole batches at once (torch and kornia, on the images' device), with the ``imagecorruptions`` package's
severity tables. Pixel lengths are literal by default (``pixel_scale=1``, CIL-ReID's setting) or scaled
(:mod:`privreid.corruptions.common`). Glass blur's shuffle and fog's fractal are the package's algorithms
(``tests/test_corruption_parity.py``); each departure (procedural frost, centred zoom ...) is in its docstring.
"""

from __future__ import annotations

from typing import Callable

import torch

from privreid.errors import ConfigError

from privreid.corruptions.blur import defocus_blur, gaussian_blur, glass_blur, motion_blur, zoom_blur
from privreid.corruptions.common import Context, make_generator, resolve_pixel_scale
from privreid.corruptions.digital import brightness, contrast, elastic_transform, jpeg_compression, pixelate, saturate, spatter
from privreid.corruptions.noise import gaussian_noise, impulse_noise, shot_noise, speckle_noise
from privreid.corruptions.weather import fog, frost, rain, snow

__all__ = ["CORRUPTIONS", "FAMILIES", "SEVERITIES", "RANDOM_CORRUPTIONS", "corrupt", "resolve_corruptions",
           "resolve_pixel_scale"]

CorruptionFn = Callable[[torch.Tensor, int, Context], torch.Tensor]

#: name -> function, in CIL-ReID's order (its ``corruption_function`` list).
CORRUPTIONS: dict[str, CorruptionFn] = {f.__name__: f for f in (
    gaussian_noise, shot_noise, impulse_noise, defocus_blur, glass_blur, motion_blur, zoom_blur, snow, frost,
    fog, brightness, contrast, elastic_transform, pixelate, jpeg_compression, speckle_noise, gaussian_blur,
    spatter, saturate, rain)}

FAMILIES: dict[str, tuple[str, ...]] = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"),
    "blur": ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "gaussian_blur"),
    "weather": ("snow", "frost", "fog", "rain"),
    "digital": ("brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression", "spatter",
                "saturate"),
}

#: Types whose output depends on the random generator (the others are deterministic).
RANDOM_CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "glass_blur",
                      "motion_blur", "snow", "frost", "fog", "rain", "elastic_transform", "spatter")

SEVERITIES = (1, 2, 3, 4, 5)


def resolve_corruptions(names: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"all"`` -> every type; a family name -> its types; otherwise a list of known names (order kept)."""
    if isinstance(names, str):
        names = [names]
    out: list[str] = []
    for name in names:
        if name == "all":
            expanded = list(CORRUPTIONS)
        elif name in FAMILIES:
            expanded = list(FAMILIES[name])
        elif name in CORRUPTIONS:
            expanded = [name]
        else:
            raise ConfigError(f"unknown corruption {name!r}; known: all, {', '.join(FAMILIES)}, "
                              f"{', '.join(CORRUPTIONS)}")
        out += [n for n in expanded if n not in out]
    if not out:
        raise ConfigError("no corruption given")
    return out


def check_severity(severity) -> int:
    """``severity`` as an int in 1..5, or a :class:`ConfigError`."""
    if isinstance(severity, bool) or not isinstance(severity, int) or severity not in SEVERITIES:
        raise ConfigError(f"severity must be an integer from 1 to 5, got {severity!r}")
    return severity


def corrupt(images: torch.Tensor, name: str, severity: int, *,
            generator: torch.Generator | int | None = None, pixel_scale: float | str = 1.0) -> torch.Tensor:
    """Apply corruption ``name`` (a key of :data:`CORRUPTIONS`) at ``severity`` (1-5) to ``images``.

    ``images``: ``(B, 3, H, W)`` floats in [0, 1], any device. ``generator``: a ``torch.Generator``, an integer
    seed (a fresh CPU generator) or ``None`` (torch's global one); images of a batch draw independently.
    ``pixel_scale``: ``1`` (CIL-ReID's literal pixel lengths on 128x64 crops), ``"auto"`` (``sqrt(H * W) / 224``)
    or a factor. Returns the same shape, dtype and device, clamped to [0, 1], computed in float32. ConfigError
    for an unknown name, a bad severity, images, generator or pixel scale.
    """
    if name not in CORRUPTIONS:
        raise ConfigError(f"unknown corruption {name!r}; known: {', '.join(CORRUPTIONS)}")
    check_severity(severity)
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 3:
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ConfigError(f"images must be a (B, 3, H, W) tensor, got {shape}")
    if not images.is_floating_point():
        raise ConfigError(f"images must be a float tensor in [0, 1], got dtype {images.dtype}")
    height, width = images.shape[-2:]
    if height < 2 or width < 2:
        raise ConfigError(f"images must be at least 2x2 pixels, got {height}x{width}")
    if images.numel() == 0:
        return images.clone()
    low, high = (float(v) for v in torch.aminmax(images))
    if low < 0 or high > 1:
        raise ConfigError(f"images must be in [0, 1] (not normalised), got values in [{low:.3g}, {high:.3g}]")
    ctx = Context(make_generator(generator), resolve_pixel_scale(pixel_scale, height, width))
    work = images.float()
    with torch.no_grad():
        out = CORRUPTIONS[name](work, severity, ctx)
    out = out.clamp(0, 1) if out is work else out.clamp_(0, 1)  # never write into the caller's tensor
    return out.to(images.dtype)
