"""Cross-modality (visible-infrared) evaluation, for images and video tracklets (L2RW+, paper 003, Sec. IV-A).

Modes.  ``ir-to-visible`` (the default, and the only mode the L2RW+ tables use: "infrared images serve as the query
set, and visible images as the gallery") ranks a test set's ``query`` against its ``gallery``; ``visible-to-ir``
swaps the two.  Either way the query is restricted to the query modality and the gallery to the other one by the test
set's ``modality`` mapping (:func:`mode_split`), so a sample of the wrong modality can never be ranked.

Ranking follows the test set's :class:`~privreid.data.types.VIProtocol` (:func:`evaluate_cross_modality`): the
Market-1501 rules of :func:`privreid.evaluation.metrics.evaluate`, plus the benchmark's single-shot gallery trials,
co-located cameras and CMC over identities.  Reported: rank-1/5/10/20, mAP and mINP (Ye et al.), each the mean over
the gallery trials (their standard deviation under ``"std"``).

Video.  A tracklet's feature is the temporal mean of its frame features, ``z = (1/T) sum_t z^t`` (Eq. 9,
:class:`TemporalMean`), over ``T`` frames chosen evenly along the tracklet
(:func:`privreid.data.torch_dataset.frame_indices`).  ``T`` is the test set's ``vi_protocol.seq_len`` unless given:
the L2RW+ settings (Sec. IV-B), 6 for HITSZ-VCM and 10 for BUPTCampus, set by their loaders.  Models are evaluated
through :func:`privreid.evaluation.model_eval.evaluate_model`, which extracts the features and ranks them here.

Randomness: trial ``t``'s gallery is drawn with ``numpy.random.default_rng([seed, t])``, so results depend on ``seed``
only; they are not the released code's draws (Python's ``random.seed(trial)``), so they agree with it in
expectation, not trial for trial.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

from privreid.data.types import INFRARED, VISIBLE, Sample, TestSet, VIProtocol
from privreid.errors import ConfigError, DataError
from privreid.evaluation.metric_registry import RETRIEVAL_METRICS, result_keys
from privreid.evaluation.metrics import evaluate

__all__ = [
    "IR_TO_VISIBLE",
    "MODES",
    "VISIBLE_TO_IR",
    "TemporalMean",
    "colocated_skips",
    "evaluate_cross_modality",
    "mode_split",
    "single_shot_gallery",
    "temporal_mean",
]

IR_TO_VISIBLE = "ir-to-visible"
VISIBLE_TO_IR = "visible-to-ir"
MODES = (IR_TO_VISIBLE, VISIBLE_TO_IR)
_CMC_LEN = 50
#: the default protocol: whole gallery, image CMC (the Market-1501 rules)
_MARKET = VIProtocol()


def mode_split(testset: TestSet, mode: str = IR_TO_VISIBLE) -> tuple[list[Sample], list[Sample]]:
    """The (query, gallery) samples of ``testset`` in evaluation ``mode`` (see the module docstring).

    A test set without ``modality`` (single-modality video) is returned as it is in ``ir-to-visible`` mode and refused
    in the other.  Raises :class:`DataError` if a sample has no modality or a side ends up empty.
    """
    if mode not in MODES:
        raise ConfigError(f"unknown evaluation mode {mode!r}; choose one of: {', '.join(MODES)}")
    if testset.modality is None:
        if mode != IR_TO_VISIBLE:
            raise ConfigError(f"test set {testset.name} has no modality information; only {IR_TO_VISIBLE} "
                              "(its own query/gallery split) applies")
        return testset.query, testset.gallery
    swap = mode == VISIBLE_TO_IR
    query, gallery = (testset.gallery, testset.query) if swap else (testset.query, testset.gallery)
    q_mod, g_mod = (VISIBLE, INFRARED) if swap else (INFRARED, VISIBLE)
    unknown = [path for path, _, _ in query + gallery if path not in testset.modality]
    if unknown:
        raise DataError(f"test set {testset.name}: {len(unknown)} samples have no modality, e.g. {unknown[0]}")
    query = [s for s in query if testset.modality[s[0]] == q_mod]
    gallery = [s for s in gallery if testset.modality[s[0]] == g_mod]
    if not query or not gallery:
        raise DataError(f"test set {testset.name} has no {q_mod if not query else g_mod} "
                        f"{'query' if not query else 'gallery'} sample for mode {mode}")
    return query, gallery


def single_shot_gallery(g_pids, g_camids, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of one gallery item drawn uniformly per (identity, camera)."""
    keys = np.stack([np.asarray(g_pids), np.asarray(g_camids)], axis=1)
    _, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    return np.sort(order[starts + (rng.random(len(counts)) * counts).astype(np.int64)])


def evaluate_cross_modality(qf, gf, q_pids, g_pids, q_camids, g_camids, *, protocol: VIProtocol = _MARKET,
                            metric: str = "euclidean", seed: int = 0) -> dict:
    """Rank query features against gallery features under a VI ``protocol``; see the module docstring.

    Returns ``rank1``, ``rank5``, ``rank10``, ``rank20``, ``mAP``, ``mINP`` (means over the gallery trials), ``cmc``
    (mean curve, 50 ranks), ``num_valid_queries`` (of the first trial), ``trials``, and with several trials ``std``
    (the standard deviation of each scalar metric).
    """
    if protocol.gallery_trials < 1:
        raise ConfigError(f"gallery_trials must be >= 1, got {protocol.gallery_trials}")
    qf = torch.as_tensor(qf, dtype=torch.float32)
    gf = torch.as_tensor(gf, dtype=torch.float32)
    q_pids, g_pids = np.asarray(q_pids, dtype=np.int64), np.asarray(g_pids, dtype=np.int64)
    q_camids, g_camids = np.asarray(q_camids, dtype=np.int64), np.asarray(g_camids, dtype=np.int64)
    if len(gf) != len(g_pids) or len(gf) != len(g_camids):
        raise ConfigError(f"gallery has {len(gf)} features but {len(g_pids)} pids and {len(g_camids)} camids")
    trials = []
    for trial in range(protocol.gallery_trials):
        if protocol.gallery_trials > 1:
            keep = single_shot_gallery(g_pids, g_camids, np.random.default_rng([seed, trial]))
        else:
            keep = np.arange(len(g_pids))
        trials.append(_rank(qf, gf[torch.from_numpy(keep)], q_pids, g_pids[keep], q_camids, g_camids[keep],
                            protocol, metric))
    out = {k: float(np.mean([t[k] for t in trials])) for k in result_keys()}
    out["cmc"] = np.mean([t["cmc"] for t in trials], axis=0)
    out["num_valid_queries"] = trials[0]["num_valid_queries"]
    out["trials"] = len(trials)
    if len(trials) > 1:
        out["std"] = {k: float(np.std([t[k] for t in trials])) for k in result_keys()}
    return out


def colocated_skips(protocol: VIProtocol) -> dict[int, frozenset[int]]:
    """Camera -> the cameras whose whole gallery its queries ignore (``protocol.colocated_cameras``, both ways)."""
    skip: dict[int, set[int]] = defaultdict(set)
    for a, b in protocol.colocated_cameras:
        skip[a].add(b)
        skip[b].add(a)
    return {cam: frozenset(others) for cam, others in skip.items()}


def _rank(qf, gf, q_pids, g_pids, q_camids, g_camids, protocol: VIProtocol, metric: str) -> dict:
    """One gallery: queries grouped by the co-located cameras they ignore, each group ranked by ``evaluate``."""
    skip = colocated_skips(protocol)
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, cam in enumerate(q_camids):
        groups[tuple(sorted(skip.get(int(cam), ())))].append(i)
    weights, parts, first_ranks = [], [], []
    for skipped, rows in groups.items():
        g_keep = np.flatnonzero(~np.isin(g_camids, skipped))
        rows = np.asarray(rows)
        rows = rows[_has_positive(q_pids[rows], q_camids[rows], g_pids[g_keep], g_camids[g_keep])]
        if len(rows) == 0:
            continue
        args = (qf[torch.from_numpy(rows)], gf[torch.from_numpy(g_keep)], q_pids[rows], g_pids[g_keep],
                q_camids[rows], g_camids[g_keep])
        res = evaluate(*args, metric=metric, max_rank=_CMC_LEN)
        weights.append(res["num_valid_queries"])
        parts.append(res)
        if protocol.cmc_by_identity:
            first_ranks.append(_identity_first_ranks(*args, metric=metric))
    if not parts:
        raise DataError("no query has a positive in the gallery (check the query/gallery split and the modalities)")
    w = np.asarray(weights, dtype=np.float64) / sum(weights)
    metrics = RETRIEVAL_METRICS.values()
    out = {m.name: float(np.dot(w, [p[m.name] for p in parts])) for m in metrics if m.rank is None}
    if protocol.cmc_by_identity:
        ranks = np.concatenate(first_ranks)
        cmc = np.array([(ranks <= k).mean() for k in range(1, _CMC_LEN + 1)])
    else:
        cmc = np.sum([wi * p["cmc"] for wi, p in zip(w, parts)], axis=0)
    out.update({m.name: float(cmc[m.rank - 1]) for m in metrics if m.rank is not None})
    out["cmc"] = cmc
    out["num_valid_queries"] = int(sum(weights))
    return out


def _has_positive(q_pids, q_camids, g_pids, g_camids) -> np.ndarray:
    """Whether each query has a gallery item of its identity from another camera (``evaluate``'s validity rule)."""
    cams: dict[int, set[int]] = defaultdict(set)
    for pid, cam in zip(g_pids.tolist(), g_camids.tolist()):
        cams[pid].add(cam)
    return np.array([bool(cams.get(p, set()) - {c}) for p, c in zip(q_pids.tolist(), q_camids.tolist())], dtype=bool)


def _identity_first_ranks(qf, gf, q_pids, g_pids, q_camids, g_camids, *, metric: str) -> np.ndarray:
    """Rank of each (valid) query's identity among the distinct gallery identities.

    An identity's position is that of its closest kept gallery item (the released code's de-duplication of the ranked
    pid list); ties are broken by gallery index, as :func:`evaluate`'s stable order does.
    """
    if metric == "cosine":
        dist = 1 - F.normalize(qf, dim=1) @ F.normalize(gf, dim=1).T
    else:
        dist = qf.pow(2).sum(1, keepdim=True) + gf.pow(2).sum(1)[None, :] - 2 * qf @ gf.T
    dist = dist.numpy()
    dist[(g_pids[None, :] == q_pids[:, None]) & (g_camids[None, :] == q_camids[:, None])] = np.inf
    perm = np.argsort(g_pids, kind="stable")
    pids, starts = np.unique(g_pids[perm], return_index=True)
    ends = np.r_[starts[1:], len(perm)]
    best = np.empty((len(q_pids), len(pids)), dtype=dist.dtype)
    first = np.empty((len(q_pids), len(pids)), dtype=np.int64)
    for j, (s, e) in enumerate(zip(starts, ends)):
        block = dist[:, perm[s:e]]
        arg = block.argmin(axis=1)
        best[:, j] = block[np.arange(len(block)), arg]
        first[:, j] = perm[s:e][arg]
    own = np.searchsorted(pids, q_pids)
    rows = np.arange(len(q_pids))
    own_d, own_i = best[rows, own][:, None], first[rows, own][:, None]
    before = (best < own_d) | ((best == own_d) & (first < own_i))
    return 1 + before.sum(axis=1)


# --------------------------------------------------------------------------- video (Eq. 9)


def temporal_mean(features: torch.Tensor, seq_len: int | None = None) -> torch.Tensor:
    """Eq. 9: the mean over time of frame features, ``(B, T, D) -> (B, D)``.

    With ``seq_len``, ``features`` may also be ``(B * T, D)`` frame features
    whose rows are grouped tracklet by tracklet (``T = seq_len``).
    """
    if features.ndim == 2 and seq_len is not None:
        if len(features) % seq_len:
            raise ConfigError(f"{len(features)} frame features do not split into tracklets of {seq_len}")
        features = features.reshape(-1, seq_len, features.shape[1])
    if features.ndim != 3:
        raise ConfigError(f"temporal_mean expects (B, T, D) features, got shape {tuple(features.shape)}")
    return features.mean(dim=1)


class TemporalMean(torch.nn.Module):
    """Wrap a frame model: ``(B, T, C, H, W)`` clips -> ``(B, D)`` tracklet features (Eq. 9)."""

    def __init__(self, frame_model: torch.nn.Module) -> None:
        super().__init__()
        self.frame_model = frame_model

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        if clips.ndim != 5:
            raise ConfigError(f"TemporalMean expects (B, T, C, H, W) clips, got shape {tuple(clips.shape)}")
        b, t = clips.shape[:2]
        return temporal_mean(self.frame_model(clips.flatten(0, 1)), seq_len=t).reshape(b, -1)
