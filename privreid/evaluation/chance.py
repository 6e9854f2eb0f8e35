"""Chance-level ReID metrics: their exact expectations under a uniformly random ranking.

A model whose features are not finite (NaN or infinite) cannot rank a gallery;
:func:`privreid.evaluation.model_eval.rank_testset` scores it, through this module, as a ranking drawn uniformly at
random.  Every value is the *exact expectation* over that random ranking (no sampling), computed per valid query and
averaged like the real metrics.  For a query, ``N`` is the number of gallery items it is ranked against (after its
protocol's removals: same identity on the query's camera, co-located cameras) and ``m`` the number of its positives;
queries with ``m = 0`` are skipped, as by the real metrics.

* ``R-k`` (image CMC): the probability that a positive is among the first ``k`` of ``N`` items,
  ``1 - prod_{j<k} (N - m - j) / (N - j)`` (hypergeometric); ``R1 = m / N``.
* ``AP``: ``E[AP] = H_N / N + (m - 1) (N - H_N) / (N (N - 1))`` with ``H_N`` the ``N``-th harmonic number, from
  ``AP = (1/m) sum_k rel_k P@k`` and ``E[rel_k rel_j] = m (m - 1) / (N (N - 1))`` for ``j != k``.
* ``INP = m / r_m`` (``r_m`` the rank of the last positive): ``E[INP] = sum_{r=m}^{N} (m / r) C(r - 1, m - 1) /
  C(N, m)``, summed in log space.
* CUHK03 single-gallery-shot CMC (one item per gallery identity, the query's own among its positives): the query's
  identity is uniform over the ``I`` gallery identities, ``R-k = min(k, I) / I``.  AP and INP use the whole kept
  gallery, as :func:`~privreid.evaluation.metrics.evaluate_cuhk03` does.
* Visible-infrared protocols (:class:`~privreid.data.types.VIProtocol`): the same single-shot gallery trials as the
  real evaluation (same seed, same draws), each query against its kept gallery; with ``cmc_by_identity`` the rank
  counts identities.  If identity ``j`` has ``n_j`` kept items and the query's own ``m``, a uniform permutation is the
  order of independent exponential clocks, an identity's first item arrives at rate ``n_j``, and with ``u = exp(-t)``
  ``P(rank <= k) = int_0^1 m u^(m-1) P(S(u) <= k - 1) du`` where ``S(u)`` counts the other identities whose first
  item came earlier, a sum of independent Bernoulli(``1 - u^n_j``).  The integrand is a polynomial of degree below
  ``N``, integrated exactly by Gauss-Legendre quadrature with ``ceil(N / 2)`` nodes.  (``R1 = m / N`` again.)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from functools import lru_cache

import numpy as np
from scipy.special import gammaln

from privreid.data.types import VIProtocol
from privreid.errors import DataError
from privreid.evaluation.metric_registry import result_keys

__all__ = ["chance_metrics"]

#: ranks of the reported CMC points
_RANKS = (1, 5, 10, 20)


def chance_metrics(q_pids, g_pids, q_camids, g_camids, *, protocol: VIProtocol | None = None,
                   single_gallery_shot: bool = False, seed: int = 0) -> dict:
    """Expected ``rank1/5/10/20``, ``mAP``, ``mINP`` of a uniformly random ranking (module docstring).

    ``protocol`` is the test set's visible-infrared protocol (``None``: the
    Market-1501 rules); ``single_gallery_shot`` the CUHK03 protocol;
    ``seed`` draws the single-shot gallery trials exactly as
    :func:`~privreid.evaluation.cross_modality.evaluate_cross_modality` does.
    Returns the keys of the real evaluation (``num_valid_queries``; ``trials``
    and ``std`` with several trials); a metric registered from outside the
    built-ins (:mod:`~privreid.evaluation.metric_registry`) is NaN.
    """
    from privreid.evaluation.cross_modality import colocated_skips, single_shot_gallery

    q_pids, g_pids = np.asarray(q_pids, dtype=np.int64), np.asarray(g_pids, dtype=np.int64)
    q_camids, g_camids = np.asarray(q_camids, dtype=np.int64), np.asarray(g_camids, dtype=np.int64)
    if protocol is None or protocol.gallery_trials == 1:
        galleries = [np.arange(len(g_pids))]
    else:
        galleries = [single_shot_gallery(g_pids, g_camids, np.random.default_rng([seed, t]))
                     for t in range(protocol.gallery_trials)]
    skips = colocated_skips(protocol) if protocol is not None else {}
    by_identity = protocol is not None and protocol.cmc_by_identity
    trials = [_trial(q_pids, q_camids, g_pids[keep], g_camids[keep], skips, by_identity, single_gallery_shot)
              for keep in galleries]
    keys = [f"rank{k}" for k in _RANKS] + ["mAP", "mINP"]
    out = {k: float(np.mean([t[k] for t in trials])) if k in keys else float("nan") for k in result_keys()}
    out["num_valid_queries"] = trials[0]["num_valid_queries"]
    if len(trials) > 1:
        out["trials"] = len(trials)
        out["std"] = {k: float(np.std([t[k] for t in trials])) for k in keys}
    return out


def _trial(q_pids, q_camids, g_pids, g_camids, skips, by_identity: bool, single_gallery_shot: bool) -> dict:
    """Expected metrics of every valid query against one gallery, averaged over the valid queries."""
    per_cam = Counter(g_camids.tolist())
    per_pid_cam = Counter(zip(g_pids.tolist(), g_camids.tolist()))
    cams_of: dict[int, list[int]] = defaultdict(list)
    for pid, cam in per_pid_cam:
        cams_of[pid].append(cam)
    rows = []
    sizes_of: dict[tuple[frozenset, int], tuple] = {}
    for pid, cam in zip(q_pids.tolist(), q_camids.tolist()):
        skipped = skips.get(cam, frozenset())
        own = sum(per_pid_cam[pid, c] for c in cams_of[pid] if c not in skipped and c != cam)
        if own == 0:
            continue
        kept = sum(n for c, n in per_cam.items() if c not in skipped) - per_pid_cam.get((pid, cam), 0) * (
            cam not in skipped)
        if by_identity or single_gallery_shot:
            if (skipped, pid) not in sizes_of:
                sizes_of[skipped, pid] = _identity_sizes(per_pid_cam, skipped, pid)
            sizes = sizes_of[skipped, pid]
            identities = 1 + sum(count for _, count in sizes)
            cmc = (_identity_cmc(own, sizes) if by_identity
                   else tuple(min(k, identities) / identities for k in _RANKS))
        else:
            cmc = _image_cmc(kept, own)
        rows.append((*cmc, _expected_ap(kept, own), _expected_inp(kept, own)))
    if not rows:
        raise DataError("no query has a positive in the gallery (check the query/gallery split and the modalities)")
    mean = np.mean(rows, axis=0)
    out = {f"rank{k}": float(v) for k, v in zip(_RANKS, mean)}
    out.update(mAP=float(mean[len(_RANKS)]), mINP=float(mean[len(_RANKS) + 1]), num_valid_queries=len(rows))
    return out


def _identity_sizes(per_pid_cam: Counter, skipped: frozenset, own_pid: int) -> tuple[tuple[int, int], ...]:
    """``((n, identities with n kept items), ...)`` for the identities other than the query's (sorted)."""
    sizes: Counter = Counter()
    for (pid, cam), n in per_pid_cam.items():
        if pid != own_pid and cam not in skipped:
            sizes[pid] += n
    return tuple(sorted(Counter(sizes.values()).items()))


def _image_cmc(total: int, positives: int) -> tuple[float, ...]:
    """``P(first positive rank <= k)`` for ``k`` in :data:`_RANKS` (hypergeometric)."""
    out, miss = [], 1.0
    for j in range(max(_RANKS)):
        miss *= max(total - positives - j, 0) / (total - j) if j < total else 0.0
        if j + 1 in _RANKS:
            out.append(1.0 - miss)
    return tuple(out)


@lru_cache(maxsize=None)
def _expected_ap(total: int, positives: int) -> float:
    if total == 1:
        return 1.0
    harmonic = float(np.sum(1.0 / np.arange(1, total + 1)))
    return harmonic / total + (positives - 1) * (total - harmonic) / (total * (total - 1))


@lru_cache(maxsize=None)
def _expected_inp(total: int, positives: int) -> float:
    r = np.arange(positives, total + 1, dtype=np.float64)
    log_p = (gammaln(r) - gammaln(positives) - gammaln(r - positives + 1)
             - (gammaln(total + 1) - gammaln(positives + 1) - gammaln(total - positives + 1)))
    return float(np.sum(positives / r * np.exp(log_p)))


@lru_cache(maxsize=None)
def _identity_cmc(positives: int, sizes: tuple[tuple[int, int], ...]) -> tuple[float, ...]:
    """``P(own identity among the first k identities)`` for ``k`` in :data:`_RANKS` (module docstring)."""
    total = positives + sum(n * count for n, count in sizes)
    nodes, weights = np.polynomial.legendre.leggauss(max(1, -(-total // 2)))
    u, w = (nodes + 1) / 2, weights / 2  # on [0, 1]
    width = max(_RANKS)
    # pmf of S(u), truncated to 0..width-1, one row per node: convolve the binomials of each size class
    pmf = np.zeros((len(u), width))
    pmf[:, 0] = 1.0
    for n, count in sizes:
        p = 1.0 - u ** n
        for _ in range(count):  # one Bernoulli(p) identity at a time: S -> S or S + 1
            pmf[:, 1:] = pmf[:, 1:] * (1 - p)[:, None] + pmf[:, :-1] * p[:, None]
            pmf[:, 0] *= 1 - p
    density = w * positives * u ** (positives - 1)
    cdf = np.cumsum(pmf, axis=1)
    return tuple(float(np.dot(density, cdf[:, k - 1])) for k in _RANKS)
