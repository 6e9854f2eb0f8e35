"""Procedural frost textures for the ``frost`` corruption (no image files shipped or downloaded).

Deviation: ImageNet-C blends a crop of one of five photographs of frost; privreid draws dendrite crystals (a
stem with side branches at +-60 degrees, the hexagonal habit of ice, shorter towards the tip) over a cloudy
plasma fractal (kornia's diamond-square), each texture a pure function of its index (``FROST_SEED + index``).
Lengths are in ImageNet-C pixels; textures are ``TEXTURE_SIDE`` square and tile seamlessly. The five styles'
crystal populations were tuned by eye against the photographs; each channel is then matched to the mean and
std of the package's photograph (:data:`PHOTO_MOMENTS`, ``imagecorruptions`` 1.1.2's ``frost1``-``frost5``),
since the blend ``a * x + b * texture`` changes an image by the texture's level and contrast (hand-set levels
were 5-25 % weaker). All five build in about 0.5 s, once per process.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from privreid.corruptions.kernels import gaussian_blur

FROST_SEED = 20190328
TEXTURE_SIDE = 384


@dataclass(frozen=True)
class FrostStyle:
    """One texture's structure: crystal populations and the contrast of crystals against the thin-ice background."""

    ferns_per_kpx: float        # large dendrites per 1000 px^2
    fern_length: float          # median stem length, px
    needles_per_kpx: float      # small, unbranched crystals per 1000 px^2
    needle_length: float        # median needle length, px
    background_amplitude: float  # plasma contrast of the background
    crystal_gain: float         # brightness added by a crystal


STYLES = (
    FrostStyle(0.9, 34.0, 9.0, 6.0, 0.30, 0.45),
    FrostStyle(1.6, 26.0, 14.0, 5.0, 0.20, 0.40),
    FrostStyle(0.5, 48.0, 6.0, 8.0, 0.35, 0.55),
    FrostStyle(2.2, 18.0, 20.0, 4.0, 0.25, 0.35),
    FrostStyle(1.2, 30.0, 4.0, 10.0, 0.40, 0.60),
)
#: Per texture: the (R, G, B) mean and standard deviation of the matching ``imagecorruptions`` photograph.
PHOTO_MOMENTS = (
    ((0.305, 0.585, 0.650), (0.106, 0.065, 0.060)),
    ((0.787, 0.805, 0.841), (0.084, 0.087, 0.089)),
    ((0.787, 0.805, 0.841), (0.084, 0.087, 0.089)),
    ((0.540, 0.599, 0.648), (0.112, 0.112, 0.117)),
    ((0.441, 0.484, 0.528), (0.174, 0.170, 0.163)),
)
#: Number of textures ``frost`` draws from (ImageNet-C draws from five photographs).
NUM_TEXTURES = len(STYLES)

_BRANCHES = 7          # side-branch pairs per fern
_BRANCH_ANGLE = math.radians(60.0)


def _segments(origins: torch.Tensor, angles: torch.Tensor, lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """Points ``(N, steps, 2)`` (x, y) along straight segments, half a pixel apart at most."""
    t = torch.linspace(0, 1, steps, dtype=torch.float64)
    direction = torch.stack([torch.cos(angles), torch.sin(angles)], -1)
    return origins[:, None, :] + (lengths[:, None, None] * t[None, :, None]) * direction[:, None, :]


def _crystals(g: torch.Generator, side: int, count: int, median_length: float, branch_ratio: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Points and brightness of ``count`` dendrites: a stem and ``_BRANCHES`` branch pairs each."""
    origins = torch.rand(count, 2, generator=g, dtype=torch.float64) * side
    angles = torch.rand(count, generator=g, dtype=torch.float64) * 2 * math.pi
    lengths = median_length * torch.exp(0.45 * torch.randn(count, generator=g, dtype=torch.float64))
    brightness = 0.45 + 0.55 * torch.rand(count, generator=g, dtype=torch.float64)
    steps = max(2, int(2 * lengths.max().item()) + 1)
    points = [_segments(origins, angles, lengths, steps)]
    values = [brightness[:, None].expand(count, steps)]
    if branch_ratio > 0:
        where = (torch.arange(1, _BRANCHES + 1, dtype=torch.float64) / (_BRANCHES + 1))  # along the stem
        for side_sign in (1.0, -1.0):
            base = origins[:, None, :] + (lengths[:, None] * where[None])[..., None] * torch.stack(
                [torch.cos(angles), torch.sin(angles)], -1)[:, None, :]
            branch_angles = (angles[:, None] + side_sign * _BRANCH_ANGLE).expand(count, _BRANCHES)
            branch_lengths = lengths[:, None] * branch_ratio * (1 - where[None])
            bsteps = max(2, int(2 * branch_lengths.max().item()) + 1)
            pts = _segments(base.reshape(-1, 2), branch_angles.reshape(-1), branch_lengths.reshape(-1), bsteps)
            points.append(pts)
            values.append((0.8 * brightness[:, None].expand(count, _BRANCHES)).reshape(-1, 1).expand(-1, bsteps))
    return (torch.cat([p.reshape(-1, 2) for p in points]),
            torch.cat([v.reshape(-1) for v in values]))


def _rasterise(points: torch.Tensor, values: torch.Tensor, side: int) -> torch.Tensor:
    """Brightest crystal value per pixel, coordinates wrapped so the texture tiles."""
    ij = points.floor().long() % side
    canvas = torch.zeros(side * side, dtype=torch.float64)
    canvas.scatter_reduce_(0, ij[:, 1] * side + ij[:, 0], values, reduce="amax")
    return canvas.view(side, side)


@functools.lru_cache(maxsize=None)
def frost_texture(index: int, side: int = TEXTURE_SIDE) -> torch.Tensor:
    """Texture ``index`` (``0 <= index < NUM_TEXTURES``): ``(3, side, side)`` float32 RGB in [0, 1], on the CPU.

    Cached: the tensor is shared, do not modify it in place.
    """
    import kornia

    style = STYLES[index]
    g = torch.Generator().manual_seed(FROST_SEED + index)
    kpx = side * side / 1000
    fern_pts, fern_val = _crystals(g, side, round(style.ferns_per_kpx * kpx), style.fern_length, 0.45)
    needle_pts, needle_val = _crystals(g, side, round(style.needles_per_kpx * kpx), style.needle_length, 0.0)
    crystals = _rasterise(torch.cat([fern_pts, needle_pts]), torch.cat([fern_val, needle_val]), side)
    crystals = gaussian_blur(crystals[None, None].float(), 0.6, border="circular")[0, 0]
    plasma = kornia.contrib.diamond_square(
        (1, 1, side, side), roughness=0.55, random_fn=functools.partial(torch.rand, generator=g),
        normalize_range=(0.0, 1.0), dtype=torch.float32)[0, 0]
    value = style.background_amplitude * plasma + style.crystal_gain * crystals
    mean, std = (torch.tensor(m, dtype=torch.float32)[:, None, None] for m in PHOTO_MOMENTS[index])
    return (mean + std * (value - value.mean()) / value.std()).expand(3, side, side).clamp(0, 1).contiguous()
