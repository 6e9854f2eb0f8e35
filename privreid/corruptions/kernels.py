"""Linear filters of the ImageNet-C corruptions, for lengths given in (fractional) pixels.

ImageNet-C's kernels have integer sizes at 224x224; scaled to a ReID crop (:mod:`privreid.corruptions.common`)
radii become fractional, so the disk is defined by pixel coverage and the motion streak by bilinear splatting.

kornia's filters go through a depthwise ``conv2d``, slow on CPU (a 15-tap separable Gaussian: 1.5 ms per
128x64 image), so a separable filter runs here as two banded matrix products ``A_y @ x @ A_x^T`` holding taps
and border rule (0.09 ms). A shared 2-D kernel is split by its SVD (terms kept to 1e-6 of its norm, exact to
float precision); per-image kernels (motion streaks) run by FFT. kornia still makes the Gaussian kernels.

Borders use torch's names: ``"reflect"`` (OpenCV's ``BORDER_REFLECT_101``), ``"symmetric"`` (scipy's
``"reflect"``), ``"replicate"`` (scipy's ``"nearest"``), ``"constant"``, ``"circular"``.
"""

from __future__ import annotations

import math

import kornia
import torch
import torch.nn.functional as F

BORDERS = ("reflect", "symmetric", "replicate", "constant", "circular")


def _source_index(src: torch.Tensor, n: int, border: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Map out-of-range indices ``src`` into ``[0, n)`` by ``border``; also return which taps are kept."""
    keep = torch.ones_like(src, dtype=torch.bool)
    if border == "replicate":
        src = src.clamp(0, n - 1)
    elif border == "reflect":
        if n == 1:
            src = torch.zeros_like(src)
        else:
            period = 2 * (n - 1)
            src = src.remainder(period)
            src = torch.where(src >= n, period - src, src)
    elif border == "symmetric":
        src = src.remainder(2 * n)
        src = torch.where(src >= n, 2 * n - 1 - src, src)
    elif border == "circular":
        src = src.remainder(n)
    elif border == "constant":
        keep = (src >= 0) & (src < n)
        src = src.clamp(0, n - 1)
    else:
        raise ValueError(f"unknown border {border!r}; expected one of {BORDERS}")
    return src, keep


def band_matrix(n: int, taps: torch.Tensor, border: str) -> torch.Tensor:
    """``(n, n)`` matrix ``A`` with ``(A @ v)[i] = sum_j taps[j] * v[i + j - len(taps) // 2]``, borders folded in
    (even lengths put the extra tap after the centre, as OpenCV); ``(B, k)`` taps give ``(B, n, n)``."""
    batched = taps.ndim == 2
    taps = taps if batched else taps[None]
    k = taps.shape[-1]
    offsets = torch.arange(n, device=taps.device)[:, None] + torch.arange(k, device=taps.device)[None] - k // 2
    src, keep = _source_index(offsets, n, border)
    weights = taps[:, None, :] * keep[None].to(taps.dtype)
    matrix = torch.zeros(taps.shape[0], n, n, device=taps.device, dtype=taps.dtype)
    matrix.scatter_add_(2, src[None].expand(taps.shape[0], n, k), weights.expand(taps.shape[0], n, k))
    return matrix if batched else matrix[0]


def separable_filter(x: torch.Tensor, taps_y: torch.Tensor | None, taps_x: torch.Tensor | None,
                     border: str) -> torch.Tensor:
    """Correlate ``(B, C, H, W)`` images with ``taps_y`` down the columns and ``taps_x`` along the rows."""
    out = x
    if taps_x is not None:
        out = out @ band_matrix(x.shape[-1], taps_x.to(x.device, x.dtype), border).transpose(-1, -2)
    if taps_y is not None:
        out = band_matrix(x.shape[-2], taps_y.to(x.device, x.dtype), border) @ out
    return out


def gaussian_radius(sigma: float, truncate: float) -> int:
    """Kernel radius of scipy / scikit-image (``int(truncate * sigma + 0.5)``), at least 1."""
    return max(1, int(truncate * sigma + 0.5))


def gaussian_taps(sigma: float, truncate: float) -> torch.Tensor | None:
    """Normalised 1-D Gaussian taps (kornia), or ``None`` for a sigma below 0.01 px (no blur)."""
    if sigma < 0.01:
        return None
    radius = gaussian_radius(sigma, truncate)
    return kornia.filters.get_gaussian_kernel1d(2 * radius + 1, sigma, dtype=torch.float64)[0]


def gaussian_blur(x: torch.Tensor, sigma: float | tuple[float, float], *, truncate: float = 4.0,
                  border: str = "replicate") -> torch.Tensor:
    """scikit-image's ``filters.gaussian`` on ``(B, C, H, W)`` (its ``truncate`` and ``mode="nearest"``);
    ``sigma`` or ``(sigma_y, sigma_x)`` in pixels, below 0.01 px leaving that axis as it is."""
    sy, sx = (sigma, sigma) if isinstance(sigma, (int, float)) else sigma
    return separable_filter(x, gaussian_taps(sy, truncate), gaussian_taps(sx, truncate), border)


def box_blur(x: torch.Tensor, size: int, border: str = "reflect") -> torch.Tensor:
    """OpenCV's ``blur`` (a ``size x size`` mean, anchor at ``size // 2``) with its default mirror border."""
    if size <= 1:
        return x
    taps = torch.full((size,), 1.0 / size, dtype=torch.float64)
    return separable_filter(x, taps, taps, border)


def smoothed_noise_gain(sigma_y: float, sigma_x: float, truncate: float) -> float:
    """Standard deviation of unit white noise after :func:`gaussian_blur`, the kernel's L2 norm (away from
    borders); the ratio of two gains carries a noise field's statistics to a scaled image."""
    gain = 1.0
    for sigma in (sigma_y, sigma_x):
        taps = gaussian_taps(sigma, truncate)
        if taps is not None:
            gain *= float(taps.square().sum().sqrt())
    return gain


#: Largest ``rank * (H + W)`` for which :func:`kernel_filter` uses separable terms rather than an FFT
#: (the terms cost ``rank * (H + W)`` multiply-adds per pixel; measured break-even on 128x64 and 256x128).
SEPARABLE_TERMS_BUDGET = 800


def kernel_filter(x: torch.Tensor, kernel: torch.Tensor, border: str) -> torch.Tensor:
    """Correlate ``(B, C, H, W)`` images with one ``(K, K)`` kernel (K odd): SVD-separable terms, or by FFT
    (:func:`batch_kernel_filter`) when they exceed :data:`SEPARABLE_TERMS_BUDGET`."""
    u, s, vh = torch.linalg.svd(kernel.to(torch.float64))
    dropped = torch.sqrt(torch.flip(torch.cumsum(torch.flip(s ** 2, [0]), 0), [0]))  # norm of terms >= i
    rank = max(1, int((dropped > 1e-6 * dropped[0]).sum()))
    h, w = x.shape[-2:]
    if rank * (h + w) > SEPARABLE_TERMS_BUDGET:
        return batch_kernel_filter(x, kernel[None], border)
    root = s[:rank].sqrt()
    rows = band_matrix(h, (u[:, :rank] * root).T.contiguous(), border).to(x.device, x.dtype)  # (r, H, H)
    cols = band_matrix(w, (vh[:rank] * root[:, None]).contiguous(), border).to(x.device, x.dtype)  # (r, W, W)
    cols = cols.transpose(-1, -2).permute(1, 0, 2).reshape(w, rank * w)  # [A_1^T ... A_r^T]
    t = (x @ cols).unflatten(-1, (rank, w)).transpose(-2, -3).reshape(*x.shape[:-2], rank * h, w)
    return rows.permute(1, 0, 2).reshape(h, rank * h) @ t


def batch_kernel_filter(x: torch.Tensor, kernels: torch.Tensor, border: str) -> torch.Tensor:
    """Correlate image ``b`` with its own ``kernels[b]`` (``(B, K, K)`` or one ``(1, K, K)``, K odd) by FFT, the
    images first padded by the radius with ``border`` so the wrap-around stays in the cropped padding."""
    h, w = x.shape[-2:]
    r = kernels.shape[-1] // 2
    if border in ("reflect", "symmetric") and (r >= h or r >= w):
        border = "replicate"  # a mirror wider than the image: torch cannot pad it
    padded = F.pad(x, (r, r, r, r), mode="reflect" if border == "symmetric" else border)
    size = padded.shape[-2:]
    # correlation = convolution with the flipped kernel, centred on index (0, 0)
    placed = torch.zeros(kernels.shape[0], *size, device=x.device, dtype=x.dtype)
    placed[:, :2 * r + 1, :2 * r + 1] = kernels.flip(-1, -2).to(x.dtype)
    placed = torch.roll(placed, shifts=(-r, -r), dims=(-2, -1))
    spectrum = torch.fft.rfft2(padded) * torch.fft.rfft2(placed)[:, None]
    return torch.fft.irfft2(spectrum, s=size)[..., r:r + h, r:r + w]


def disk_kernel(radius: float, alias_sigma: float) -> torch.Tensor:
    """ImageNet-C's defocus kernel: a normalised disk of ``radius`` px, then a small Gaussian (anti-aliasing).

    Deviation: ImageNet-C keeps the pixels with ``x^2 + y^2 <= r^2``; here each pixel weighs the fraction of its
    area inside the circle (8x8 sub-samples), meaningful for fractional radii. The ``alias_sigma`` Gaussian has
    ImageNet-C's support (3x3 up to 8 px, 5x5 beyond). Float64 ``(K, K)``.
    """
    reach = math.ceil(radius + 0.5)
    sub = (torch.arange(8, dtype=torch.float64) + 0.5) / 8 - 0.5
    centres = torch.arange(-reach, reach + 1, dtype=torch.float64)
    pos = (centres[:, None] + sub[None, :]).reshape(-1)
    inside = (pos[:, None] ** 2 + pos[None, :] ** 2) <= radius ** 2
    n = len(centres)
    kernel = inside.reshape(n, 8, n, 8).double().mean(dim=(1, 3))
    kernel = kernel / kernel.sum()
    if alias_sigma >= 0.01:
        support = 3 if radius <= 8 else 5
        kernel = F.pad(kernel, (support // 2,) * 4)[None, None]
        g = kornia.filters.get_gaussian_kernel1d(support, alias_sigma, dtype=torch.float64)[0]
        kernel = separable_filter(kernel, g, g, "constant")[0, 0]
        kernel = kernel / kernel.sum()
    return kernel


def streak_kernel(radius: float, sigma: float, angles_deg: torch.Tensor) -> torch.Tensor:
    """ImageNet-C's motion-blur kernel, one per angle: float64 ``(B, K, K)`` for ``B`` angles (degrees).

    ImageNet-C (``imagecorruptions``) sums copies shifted by ``t = 0 .. 2 * radius`` px along the direction,
    weighted by ``exp(-t^2 / (2 sigma^2))`` (normalised), a one-sided streak; here the taps are splatted
    bilinearly instead of rounded. Output ``p = sum_t w_t * x(p + t * (cos a, sin a))`` (x right, y down).
    """
    device = angles_deg.device
    t = torch.arange(int(math.floor(2 * radius)) + 1, device=device, dtype=torch.float64)
    w = torch.exp(-t ** 2 / (2 * max(sigma, 1e-3) ** 2))
    w = w / w.sum()
    half = int(math.ceil(t[-1].item())) + 1
    size = 2 * half + 1
    a = torch.deg2rad(angles_deg.to(torch.float64))[:, None]
    px = half + t[None] * torch.cos(a)
    py = half + t[None] * torch.sin(a)
    x0, y0 = px.floor(), py.floor()
    fx, fy = px - x0, py - y0
    kernel = torch.zeros(len(angles_deg), size * size, device=device, dtype=torch.float64)
    for dy, dx, weight in ((0, 0, (1 - fy) * (1 - fx)), (0, 1, (1 - fy) * fx),
                           (1, 0, fy * (1 - fx)), (1, 1, fy * fx)):
        index = ((y0 + dy).clamp(0, size - 1) * size + (x0 + dx).clamp(0, size - 1)).long()
        kernel.scatter_add_(1, index, weight * w[None])
    return kernel.reshape(-1, size, size)
