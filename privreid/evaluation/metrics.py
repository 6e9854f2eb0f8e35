"""Person re-identification metrics: CMC, mAP and mINP.

Semantics follow torchreid's ``metrics/rank.py`` (``eval_market1501`` / ``eval_cuhk03``) and fast-reid's evaluator:

* For a query with identity ``pid`` seen by camera ``cam``, gallery images with the same ``pid`` *and* the same
  ``cam`` are removed from that query's ranking.
* Remaining gallery images with the same ``pid`` are the query's positives; everything else, pid ``0`` distractors
  included, is a negative.
* A query with no positive left is skipped; every average is over the remaining ("valid") queries.
* The gallery is ranked by a **stable** sort of the distances: ties are broken by gallery index, lower first.

With ``r_1 < r_2 < ... < r_m`` the 1-based ranks of a valid query's ``m`` positives among its kept gallery items:

* ``AP = (1/m) * sum_k k / r_k`` (the precision at each positive, averaged, as torchreid computes it);
* ``INP = m / r_m`` (inverse negative penalty, Ye et al., "Deep Learning for Person Re-identification: A Survey and
  Outlook", TPAMI 2021: the fraction of the ranking up to the hardest positive made of positives);
* ``CMC[k] = 1`` if ``r_1 <= k + 1``.

``ap="devkit"`` instead takes the Market-1501 evaluation devkit's AP, the area under the precision-recall curve by
the trapezoid rule: each positive adds ``1/m`` of recall, over which precision goes from ``(k - 1) / (r_k - 1)``
just before it (``1`` when ``r_k = 1``) to ``k / r_k``, so ``AP = (1/m) * sum_k ((k - 1) / (r_k - 1) + k / r_k) / 2``;
and ``mAP`` is averaged over **all** queries, a query without a positive counting 0, as the FedPav reference code
(cap-ntu/FedReID ``evaluate.py``) does.  CMC, rank-k and mINP are unchanged (over the valid queries).

Cost.  torchreid builds the whole ``Q x G`` distance matrix and argsorts every row (about 20 GB at MSMT17 size).
Every metric above needs only the ranks of the positives, so queries are processed in chunks: one float32 matrix
product per chunk (the floor of any exact evaluator), removed items set to ``+inf``, then for each query the gallery
items strictly closer than each positive are counted: entries beyond the hardest positive can never count, so they
are clamped to one value, the row is sorted (numpy's vectorised sort handles the repeated value cheaply) in a
cache-sized scratch block, and the positives' distances are binary-searched in it.  Rows are spread over
``torch.get_num_threads()`` threads.  Exact ties between a positive and other items are resolved by gallery index,
which reproduces the stable order exactly.  Extra memory: one float32 ``chunk x G`` buffer plus a 1 MiB scratch block
per thread.  A batched ``torch.searchsorted`` of every gallery distance against the few positive distances
(``O(G log m)``) measured about ten times slower per element on CPU than numpy's SIMD sort of the row, hence sorting.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from privreid.errors import ConfigError, DataError
from privreid.evaluation.metric_registry import RETRIEVAL_METRICS, Ranking

__all__ = ["evaluate", "evaluate_cuhk03", "check_count", "AP_MODES", "METRICS"]

METRICS = ("euclidean", "cosine")
#: how AP is computed and averaged (module docstring): torchreid's, or the Market-1501 devkit's as FedPav's code
AP_MODES = ("torchreid", "devkit")

# Default number of distance entries per query chunk (2**24 float32 = 64 MiB).
_CHUNK_ELEMENTS = 1 << 24
# Feature entries squared at a time when computing norms (1 MiB, cache-sized).
_NORM_ELEMENTS = 1 << 18
# Distance entries sorted per block when counting (1 MiB: stays in cache).
_BLOCK_ELEMENTS = 1 << 18


def evaluate(qf, gf, q_pids, g_pids, q_camids, g_camids, metric: str = "euclidean", max_rank: int = 50,
             chunk_size: int | None = None, ap: str = "torchreid") -> dict:
    """Evaluate a ReID ranking with the Market-1501 protocol.

    Args:
        qf: query features, ``(Q, D)`` float tensor or array.
        gf: gallery features, ``(G, D)`` float tensor or array.
        q_pids, g_pids: 1-D integer identity labels (pid ``0`` = distractor).
        q_camids, g_camids: 1-D integer camera labels.
        metric: ``"euclidean"`` ranks by squared Euclidean distance; ``"cosine"`` by ``1 - cosine similarity``.
        max_rank: length of the returned CMC curve.
        chunk_size: queries processed at a time; ``None``: about 2**24 distances per chunk (a 64 MiB buffer).
        ap: ``"torchreid"`` (default) or ``"devkit"`` (:data:`AP_MODES`, the module docstring): which AP, and which
            queries ``mAP`` averages.

    Returns:
        A dict with ``"cmc"`` (float64 array of length ``max_rank``: ``cmc[k]`` is the fraction of valid queries whose
        first positive is at rank ``<= k + 1``), ``"rank1"``, ``"rank5"``, ``"rank10"``, ``"rank20"``, ``"mAP"``,
        ``"mINP"`` (floats in ``[0, 1]``) and ``"num_valid_queries"`` (int).

        Unlike torchreid, which truncates the CMC curve to a gallery smaller than ``max_rank``, the curve always has
        ``max_rank`` entries, staying at its last value (1.0) past the kept gallery items.  ``rank20`` and friends
        come from the first-positive ranks directly, so they do not depend on ``max_rank``.

    Raises:
        ConfigError: unknown ``metric`` or ``ap``, mismatched shapes or lengths, or a non-positive ``max_rank`` /
            ``chunk_size``.
        DataError: empty or non-finite features, or no query with a positive in the gallery.
    """
    problem = _prepare(qf, gf, q_pids, g_pids, q_camids, g_camids, metric, max_rank, chunk_size, ap)
    first, aps, inp = map(np.concatenate, zip(*(_rank_metrics(c.ranks, c.num_pos, ap) for c in _iter_chunks(problem))))
    hist = np.bincount(np.minimum(first, problem.hist_len), minlength=problem.hist_len + 1).astype(np.float64)
    return _summarise(hist, len(first), aps, inp, max_rank, _ap_queries(problem, ap))


def evaluate_cuhk03(qf, gf, q_pids, g_pids, q_camids, g_camids, metric: str = "euclidean", max_rank: int = 50,
                    chunk_size: int | None = None, repeats: int = 10, seed: int = 0, ap: str = "torchreid") -> dict:
    """Evaluate with the CUHK03 single-gallery-shot protocol.

    As torchreid's ``eval_cuhk03``: for each valid query (the rules of :func:`evaluate`) and each of ``repeats``
    repeats, one gallery image is drawn uniformly at random per gallery identity (per pid, so all pid-0 distractors
    form one identity); for the query's own identity the draw is among its positives, the other identities keep all
    their images.  The query's CMC is computed on the drawn images (same stable order) and averaged over the repeats,
    then over valid queries.  ``mAP`` and ``mINP`` are computed on the whole kept gallery, as :func:`evaluate` does
    (torchreid's ``eval_cuhk03`` also computes AP without sampling; it has no mINP).

    Randomness: the draws of query ``i`` come from ``numpy.random.default_rng([seed, i])``, so results depend on
    ``seed`` only, not on ``chunk_size``.  They are not torchreid's draws (it uses the global numpy state), so CMC
    values agree with torchreid's in expectation, not draw for draw.

    Args and returns as for :func:`evaluate` (``ap`` included), plus ``repeats`` (>= 1) and ``seed`` (>= 0).
    """
    check_count("repeats", repeats, 1)
    check_count("seed", seed, 0)
    problem = _prepare(qf, gf, q_pids, g_pids, q_camids, g_camids, metric, max_rank, chunk_size, ap)
    g_order = problem.g_order
    g_sorted = problem.g_pids[g_order]
    group_start = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    group_count = np.diff(np.r_[group_start, len(g_sorted)])
    group_pids = g_sorted[group_start]

    hist = np.zeros(problem.hist_len + 1, dtype=np.float64)
    aps, inp, num_valid = [], [], 0
    for chunk in _iter_chunks(problem):
        _, a, i = _rank_metrics(chunk.ranks, chunk.num_pos, ap)
        aps.append(a)
        inp.append(i)
        num_valid += len(chunk.queries)
        dist = chunk.dist.numpy()
        own = np.searchsorted(group_pids, problem.q_pids[chunk.queries])
        for row, q in enumerate(chunk.queries):
            rng = np.random.default_rng([seed, int(q)])
            draw = (rng.random((repeats, len(group_pids))) * group_count).astype(np.int64)
            items = g_order[group_start + draw]
            pick = rng.integers(chunk.num_pos[row], size=repeats)
            p_item = chunk.pos_items[row, pick][:, None]
            p_dist = chunk.pos_dist[row, pick][:, None]
            d = dist[row, items]
            before = (d < p_dist) | ((d == p_dist) & (items < p_item))
            before[:, own[row]] = False
            ranks = 1 + before.sum(axis=1)
            hist += np.bincount(np.minimum(ranks, problem.hist_len),
                                minlength=problem.hist_len + 1) / repeats
    return _summarise(hist, num_valid, np.concatenate(aps), np.concatenate(inp),
                      max_rank, _ap_queries(problem, ap))


# --------------------------------------------------------------------------
# Preparation and validation


@dataclass
class _Problem:
    qf: torch.Tensor  # (Q, D) float32
    gf: torch.Tensor  # (G, D) float32
    g_scale: torch.Tensor  # euclidean: ||g||^2; cosine: 1 / max(||g||, eps)
    q_scale: torch.Tensor  # euclidean: -2; cosine: -1 / max(||q||, eps)
    metric: str
    q_pids: np.ndarray
    g_pids: np.ndarray
    g_order: np.ndarray  # gallery indices stably sorted by pid
    chunk_rows: int
    hist_len: int  # first-positive ranks are clipped to this value
    # Valid queries and their positive / removed gallery items, as flat
    # (query, gallery) pair lists sorted by query then gallery index.
    valid: np.ndarray
    num_pos: np.ndarray  # per query
    pos_q: np.ndarray
    pos_g: np.ndarray
    pos_slot: np.ndarray  # index of the pair among its query's positives
    rem_q: np.ndarray
    rem_g: np.ndarray


def _prepare(qf, gf, q_pids, g_pids, q_camids, g_camids, metric, max_rank,
             chunk_size, ap) -> _Problem:
    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}; expected one of {METRICS}")
    if ap not in AP_MODES:
        raise ConfigError(f"unknown ap {ap!r}; expected one of {AP_MODES}")
    check_count("max_rank", max_rank, 1)
    if chunk_size is not None:
        check_count("chunk_size", chunk_size, 1, " or None")
    qf = _as_features(qf, "qf")
    gf = _as_features(gf, "gf")
    if qf.shape[1] != gf.shape[1]:
        raise ConfigError(
            f"query and gallery features differ in dimension: {qf.shape[1]} vs {gf.shape[1]}")
    q_pids = _as_ids(q_pids, "q_pids", len(qf), "qf")
    q_camids = _as_ids(q_camids, "q_camids", len(qf), "qf")
    g_pids = _as_ids(g_pids, "g_pids", len(gf), "gf")
    g_camids = _as_ids(g_camids, "g_camids", len(gf), "gf")
    if len(qf) == 0 or len(gf) == 0:
        raise DataError(
            f"cannot evaluate an empty query or gallery set ({len(qf)} queries, "
            f"{len(gf)} gallery images)")

    q_sq = _squared_norms(qf)
    g_sq = _squared_norms(gf)
    for name, sq in (("query", q_sq), ("gallery", g_sq)):
        if not bool(torch.isfinite(sq).all()):
            raise DataError(f"{name} features contain NaN or infinite values")
    if metric == "euclidean":
        # ||q||^2 is constant for a query, so ||g||^2 - 2 q.g ranks exactly like the squared distance.  Reject
        # features so large that this could overflow float32 (it would make distances infinite).
        bound = 2.0 * math.sqrt(float(q_sq.max())) * math.sqrt(float(g_sq.max())) + float(g_sq.max())
        if not bound < float(torch.finfo(torch.float32).max):
            raise DataError("feature norms are too large for float32 squared distances")
        g_scale = g_sq
        q_scale = torch.full((len(qf), 1), -2.0)
    else:
        # 1 - cos(q, g) ranks like -(q / |q|) . g / |g|; eps as in F.normalize.
        g_scale = 1.0 / g_sq.sqrt().clamp_min(1e-12)
        q_scale = (-1.0 / q_sq.sqrt().clamp_min(1e-12))[:, None]

    # Positives and removed items of every query.
    g_order = np.argsort(g_pids, kind="stable")
    g_sorted = g_pids[g_order]
    lo = np.searchsorted(g_sorted, q_pids, side="left")
    n_same = np.searchsorted(g_sorted, q_pids, side="right") - lo
    pair_q = np.repeat(np.arange(len(qf)), n_same)
    starts = np.cumsum(n_same) - n_same
    pair_g = g_order[np.repeat(lo - starts, n_same) + np.arange(len(pair_q))]
    removed = g_camids[pair_g] == q_camids[pair_q]
    pos_q, pos_g = pair_q[~removed], pair_g[~removed]
    num_pos = np.bincount(pos_q, minlength=len(qf))
    valid = np.flatnonzero(num_pos > 0)
    if len(valid) == 0:
        raise DataError(
            "no query has a positive in the gallery (a gallery image with the "
            "query's pid from another camera); check the query/gallery split and labels")
    pos_slot = np.arange(len(pos_q)) - np.repeat(np.cumsum(num_pos) - num_pos, num_pos)

    chunk_rows = chunk_size if chunk_size is not None else max(1, _CHUNK_ELEMENTS // len(gf))
    return _Problem(
        qf=qf, gf=gf, g_scale=g_scale, q_scale=q_scale, metric=metric,
        q_pids=q_pids, g_pids=g_pids, g_order=g_order,
        chunk_rows=int(min(chunk_rows, len(valid))),
        hist_len=max(int(max_rank), *(m.rank for m in RETRIEVAL_METRICS.values() if m.rank)) + 1,
        valid=valid, num_pos=num_pos, pos_q=pos_q, pos_g=pos_g, pos_slot=pos_slot,
        rem_q=pair_q[removed], rem_g=pair_g[removed],
    )


def check_count(name: str, value, low: int, alternative: str = "") -> None:
    """ConfigError unless ``value`` is an integer (not a bool) of at least ``low`` (0 or 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        kind = "positive" if low else "non-negative"
        raise ConfigError(f"{name} must be a {kind} integer{alternative}, got {value!r}")


def _as_features(x, name: str) -> torch.Tensor:
    t = torch.as_tensor(x).detach()
    if t.ndim != 2:
        raise ConfigError(f"{name} must be a 2-D (N, D) feature matrix, got shape {tuple(t.shape)}")
    if t.is_complex() or t.dtype == torch.bool:
        raise ConfigError(f"{name} must hold real numbers, got dtype {t.dtype}")
    return t.to(device="cpu", dtype=torch.float32).contiguous()


def _as_ids(x, name: str, n: int, feat_name: str) -> np.ndarray:
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if a.ndim != 1:
        raise ConfigError(f"{name} must be 1-D, got shape {a.shape}")
    if len(a) != n:
        raise ConfigError(f"{name} has {len(a)} entries but {feat_name} has {n} rows")
    if len(a) and not np.issubdtype(a.dtype, np.integer):
        raise ConfigError(f"{name} must hold integers, got dtype {a.dtype}")
    return a.astype(np.int64, copy=False)


def _squared_norms(x: torch.Tensor) -> torch.Tensor:
    """Row-wise sum of squares in float32, computed in blocks of rows."""
    out = torch.empty(len(x))
    rows = max(1, _NORM_ELEMENTS // max(1, x.shape[1]))
    for s in range(0, len(x), rows):
        block = x[s:s + rows]
        out[s:s + rows] = (block * block).sum(dim=1)
    return out


# --------------------------------------------------------------------------
# Chunked ranking


@dataclass
class _Chunk:
    queries: np.ndarray  # (n,) query indices
    dist: torch.Tensor  # (n, G) ranking scores; removed items are +inf
    num_pos: np.ndarray  # (n,) positives per query (>= 1)
    pos_items: np.ndarray  # (n, M) gallery index of each positive, padded with -1
    pos_dist: np.ndarray  # (n, M) score of each positive, padded with +inf
    ranks: np.ndarray  # (n, M) 1-based rank of each positive, padded with 0


def _iter_chunks(problem: _Problem) -> Iterator[_Chunk]:
    """Yield the valid queries in chunks, with the rank of every positive.

    The yielded ``dist`` is a view of a reused buffer: it is only valid until
    the next chunk is produced.
    """
    G = len(problem.gf)
    rows = problem.chunk_rows
    # A one-row product goes through MKL's gemv, whose tail columns round differently from the others; identical
    # gallery rows must get identical distances (their tie broken by index), so one-query chunks are two rows.
    dist_buf = torch.empty(max(rows, 2), G)
    threads = max(1, min(torch.get_num_threads(), rows))
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
    g_t = problem.gf.T
    pos_bounds = np.r_[0, np.cumsum(problem.num_pos)]
    rem_bounds = np.searchsorted(problem.rem_q, np.arange(len(problem.qf) + 1))
    try:
        for start in range(0, len(problem.valid), rows):
            queries = problem.valid[start:start + rows]
            n = len(queries)
            padded = np.r_[queries, queries] if n == 1 else queries
            qc = problem.qf[padded] * problem.q_scale[padded]
            dist = dist_buf[:len(padded)]
            if problem.metric == "euclidean":
                torch.addmm(problem.g_scale, qc, g_t, out=dist)
            else:
                torch.mm(qc, g_t, out=dist)
                dist.mul_(problem.g_scale)
            dist = dist[:n]

            # Positive / removed pairs of these queries (pairs are sorted by
            # query, and the chunk's queries are increasing).
            pos_sel = slice(pos_bounds[queries[0]], pos_bounds[queries[-1] + 1])
            rem_sel = slice(rem_bounds[queries[0]], rem_bounds[queries[-1] + 1])
            rem_q = problem.rem_q[rem_sel]
            rem_row = np.searchsorted(queries, rem_q).clip(max=n - 1)
            in_chunk = queries[rem_row] == rem_q  # skips invalid queries' pairs
            rem_row, rem_item = rem_row[in_chunk], problem.rem_g[rem_sel][in_chunk]
            p_row = np.searchsorted(queries, problem.pos_q[pos_sel])
            p_item = problem.pos_g[pos_sel]
            p_slot = problem.pos_slot[pos_sel]
            num_pos = problem.num_pos[queries]
            width = int(num_pos.max())
            pos_items = np.full((n, width), -1, dtype=np.int64)
            pos_items[p_row, p_slot] = p_item
            dist_np = dist.numpy()
            pos_dist = np.full((n, width), np.inf, dtype=np.float32)
            pos_dist[p_row, p_slot] = dist_np[p_row, p_item]
            dist_np[rem_row, rem_item] = np.inf

            # Count the kept items strictly closer than each positive (left) and no farther than it (right: "<= t"
            # is "< the next float32 after t").
            real = pos_items >= 0
            caps = np.nextafter(np.where(real, pos_dist, -np.inf).max(axis=1), np.float32(np.inf))
            targets = np.concatenate([pos_dist, np.nextafter(pos_dist, np.float32(np.inf))], axis=1)
            counts = np.empty((n, 2 * width), dtype=np.int64)
            bounds = np.linspace(0, n, threads + 1).astype(int)
            jobs = [(dist_np, caps, targets, counts, a, b)
                    for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
            if pool is None:
                for job in jobs:
                    _count_below(*job)
            else:
                for future in [pool.submit(_count_below, *job) for job in jobs]:
                    future.result()
            left, right = counts[:, :width], counts[:, width:]
            ranks = np.where(real, left + 1, 0)
            # A positive always ties with itself; other ties are broken by
            # gallery index (stable order).
            tied = real & (right - left > 1)
            for r in np.unique(np.nonzero(tied)[0]):
                for value in np.unique(pos_dist[r][tied[r]]):
                    equal = np.flatnonzero(dist_np[r] == value)
                    cols = np.flatnonzero(tied[r] & (pos_dist[r] == value))
                    ranks[r, cols] += np.searchsorted(equal, pos_items[r, cols])
            yield _Chunk(queries, dist, num_pos, pos_items, pos_dist, ranks)
    finally:
        if pool is not None:
            pool.shutdown()


def _count_below(dist, caps, targets, out, start, stop) -> None:
    """For rows ``start:stop``: ``out[r, j] = #{entries of dist[r] < targets[r, j]}``.

    Every target of row ``r`` is below ``caps[r]``, so entries at or above the cap can never count: they are clamped
    to the cap, the row is sorted in a small scratch block and the targets are binary-searched.  Clamping makes the
    far part of the ranking (most of it, for a ReID model) one repeated value, which numpy's vectorised sort usually
    handles several times faster than a full row (never measured slower).  Rows are processed in blocks so that each
    call is long and releases the GIL (numpy's ``minimum`` and ``sort``, torch's ``searchsorted``): threads run in
    parallel.
    """
    rows = max(1, _BLOCK_ELEMENTS // dist.shape[1])
    scratch = np.empty((rows, dist.shape[1]), dtype=dist.dtype)
    for s in range(start, stop, rows):
        e = min(stop, s + rows)
        block = scratch[:e - s]
        np.minimum(dist[s:e], caps[s:e, None], out=block)
        block.sort(axis=1)
        # One batched search per block (torch releases the GIL; a Python
        # loop of small numpy searches would hold it).
        torch.searchsorted(torch.from_numpy(block), torch.from_numpy(targets[s:e]),
                           out=torch.from_numpy(out[s:e]))


def _rank_metrics(ranks: np.ndarray, num_pos: np.ndarray, ap: str = "torchreid"):
    """First-positive rank, AP (``ap``: module docstring) and INP per query from its positives' ranks."""
    r = np.sort(np.where(ranks > 0, ranks, np.iinfo(np.int64).max), axis=1)
    k = np.arange(1, r.shape[1] + 1)
    real = k[None, :] <= num_pos[:, None]
    precision = k / r
    if ap == "devkit":  # trapezoid between the precision just before each positive and at it
        precision = (np.where(r > 1, (k - 1) / np.maximum(r - 1, 1), 1.0) + precision) / 2
    inp = num_pos / r[np.arange(len(r)), num_pos - 1]
    return r[:, 0], np.where(real, precision, 0.0).sum(axis=1) / num_pos, inp


def _ap_queries(problem: _Problem, ap: str) -> int:
    """The number of queries ``mAP`` averages over: the valid ones, or all of them (``ap="devkit"``)."""
    return len(problem.qf) if ap == "devkit" else len(problem.valid)


def _summarise(hist: np.ndarray, num_valid: int, ap: np.ndarray, inp: np.ndarray,
               max_rank: int, ap_queries: int) -> dict:
    """Build the result dict from a histogram of first-positive ranks.

    ``hist[r]`` is the (possibly fractional) number of valid queries whose
    first positive is at rank ``r`` (the last bin collects every larger rank).
    ``ap`` holds the valid queries' APs; ``mAP`` is their sum over ``ap_queries``.
    """
    cmc = np.cumsum(hist[1:]) / num_valid
    ranking = Ranking(cmc, ap, inp, ap_queries)
    return {"cmc": cmc[:max_rank].copy(), **{m.name: m.compute(ranking) for m in RETRIEVAL_METRICS.values()},
            "num_valid_queries": int(num_valid)}
