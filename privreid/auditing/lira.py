"""The likelihood-ratio test of LiRA (Carlini et al., S&P 2022, Sec. IV, Algorithm 1).

Per candidate, the statistic ``phi`` (:mod:`privreid.auditing.statistics`) of the K shadow models that trained
on it (IN) and of those that did not (OUT) are modelled as Gaussians. **online**: ``Lambda = log N(phi_target;
mu_in, sigma_in^2) - log N(phi_target; mu_out, sigma_out^2)`` (Algorithm 1, line 14, log form); **offline**:
``Lambda = Pr[Z < phi_target], Z ~ N(mu_out, sigma_out^2)`` (Sec. IV-C). As the paper (Sec. VI-A), one global
variance per side with few shadows (``fix_variance``, default below 64), a per-candidate mean always.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

#: below this many shadow models, one global variance per side (Carlini et al. Sec. VI-A)
PER_EXAMPLE_VARIANCE_FROM = 64


def _fit(values: np.ndarray, mask: np.ndarray, fix_variance: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-candidate mean and std of ``values`` (K, n) over the shadows where ``mask`` is true."""
    count = mask.sum(axis=0)
    if (count == 0).any():
        raise ValueError("a candidate has no shadow model on this side; use more shadow models")
    mean = np.where(mask, values, 0.0).sum(axis=0) / count
    resid = np.where(mask, values - mean, 0.0)
    if fix_variance:
        std = np.full(values.shape[1], np.sqrt((resid ** 2).sum() / max(mask.sum() - values.shape[1], 1)))
    else:
        std = np.sqrt((resid ** 2).sum(axis=0) / np.maximum(count - 1, 1))
    return mean, np.maximum(std, 1e-6)


def lira_scores(target: np.ndarray, shadows: np.ndarray, masks: np.ndarray, *, online: bool,
                fix_variance: bool | None = None) -> np.ndarray:
    """LiRA's membership score of each candidate (higher = member); ``shadows`` and ``masks`` are ``(K, n)``."""
    shadows, masks = np.asarray(shadows, dtype=np.float64), np.asarray(masks, dtype=bool)
    if fix_variance is None:
        fix_variance = shadows.shape[0] < PER_EXAMPLE_VARIANCE_FROM
    mu_out, sd_out = _fit(shadows, ~masks, fix_variance)
    if not online:
        return norm.cdf(target, mu_out, sd_out)
    mu_in, sd_in = _fit(shadows, masks, fix_variance)
    return norm.logpdf(target, mu_in, sd_in) - norm.logpdf(target, mu_out, sd_out)


def balanced_masks(k: int, n: int, seed: int) -> np.ndarray:
    """``(k, n)`` inclusion masks: every candidate IN for exactly ``k // 2`` shadows, at random (Carlini et al.'s split)."""
    if k < 2 or k % 2:
        raise ValueError(f"LiRA needs an even number of shadow models >= 2 (got {k})")
    rng = np.random.default_rng([seed, k, n, 0x11A])
    return np.argsort(rng.random((k, n)), axis=0) < k // 2
