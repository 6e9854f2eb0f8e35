"""Backdoor success of a retrieval backdoor, always next to the clean R1 / mAP of the same model.

A trigger (a patch) on a query is meant to change what it retrieves:

* **targeted** (:func:`targeted_metrics`): the attack success rate at rank ``k`` (``asr``: rank 1, ``asr@5``,
  ``asr@10``) is the fraction of triggered queries, of identities other than the target, with a target gallery item
  among their first ``k`` matches, and ``targeted_mAP`` their mAP with the target as the only relevant identity,
  ranked as :func:`~privreid.evaluation.metrics.evaluate` ranks.  The same on the gallery without the attacker's own
  images of the target (suffix ``_clean_gallery``: the whole-gallery ASR counts hits on images the attacker trained
  on); :func:`durability` reads the ASR per round recorded during training;
* **evasion**: the drop of the triggered queries' mAP against the same queries without the trigger (the triggered
  person leaves the top ranks).

Both take the features of the same queries without and with the trigger, so the clean metrics next to them are the
same model's on the same queries.  :func:`evaluate_backdoor` stamps a run's recorded trigger
(:func:`privreid.malicious_clients.backdoor.recorded_backdoor`) on every query of a test set (``privreid eval``,
``privreid compare --suite poisoning``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from privreid.data.trigger import stamped_samples
from privreid.errors import ConfigError
from privreid.evaluation.chance import chance_metrics
from privreid.evaluation.metrics import evaluate
from privreid.evaluation.model_eval import NonFiniteFeaturesWarning, sample_features

if TYPE_CHECKING:
    from privreid.data.types import TestSet


#: the ranks ``k`` of the ASR at rank ``k`` (``asr`` is rank 1, then ``asr@5``, ``asr@10``)
ASR_RANKS = (1, 5, 10)
#: the key suffix of the targeted metrics on the gallery without the attacker's own images of the target
CLEAN_GALLERY = "_clean_gallery"


def _distances(qf: torch.Tensor, gf: torch.Tensor, metric: str) -> torch.Tensor:
    if metric == "cosine":
        return 1 - torch.nn.functional.normalize(qf, dim=1) @ torch.nn.functional.normalize(gf, dim=1).T
    return torch.cdist(qf.double(), gf.double()).pow(2)


def removed_matches(q_pids, g_pids, q_camids, g_camids) -> np.ndarray:
    """Market-1501's removal, query x gallery: a gallery item of the query's identity seen by the query's camera."""
    return ((np.asarray(q_pids)[:, None] == np.asarray(g_pids)[None, :])
            & (np.asarray(q_camids)[:, None] == np.asarray(g_camids)[None, :]))


def _asr_keys(suffix: str = "") -> list[str]:
    return [("asr" if k == 1 else f"asr@{k}") + suffix for k in ASR_RANKS] + ["targeted_mAP" + suffix]


def targeted_metrics(qf, gf, q_pids, g_pids, q_camids, g_camids, target: int, metric: str = "euclidean",
                     chunk: int = 256) -> dict:
    """The ASR at ranks :data:`ASR_RANKS` and the targeted mAP of (triggered) queries of identities other than
    ``target``.

    Each query is ranked as :func:`~privreid.evaluation.metrics.evaluate` ranks (gallery items of its own
    identity seen by its camera removed; ties by gallery order) with the ``target``'s gallery items as its only
    relevant ones: ``asr@k`` is the share of queries with a target item among the first ``k``, ``targeted_mAP``
    the mean of ``AP = (1/m) sum_j rel_j P@j`` over the queries (``m`` target items).  ``asr_queries``: how many
    queries count.  Queries in chunks of ``chunk`` (a full distance matrix need not fit)."""
    q_pids, g_pids = np.asarray(q_pids), np.asarray(g_pids)
    others = np.flatnonzero(q_pids != target)
    relevant = torch.as_tensor(g_pids == target)
    qf, gf = torch.as_tensor(qf, dtype=torch.float32), torch.as_tensor(gf, dtype=torch.float32)
    hits, ap = np.zeros((len(others), len(ASR_RANKS)), dtype=bool), np.zeros(len(others))
    positions = torch.arange(1, len(g_pids) + 1, dtype=torch.float64)
    for start in range(0, len(others), chunk):
        rows = others[start:start + chunk]
        dist = _distances(qf[rows], gf, metric).double()
        dist[torch.as_tensor(removed_matches(q_pids[rows], g_pids, np.asarray(q_camids)[rows], g_camids))] = float("inf")
        # removed items are never the target's (the queries are of other identities): last, after every target item
        rel = relevant[dist.argsort(dim=1, stable=True)].double()
        first = torch.where(rel.any(1), rel.argmax(1), len(g_pids)).numpy()
        hits[start:start + len(rows)] = first[:, None] < np.asarray(ASR_RANKS)[None, :]
        ap[start:start + len(rows)] = ((rel * rel.cumsum(1) / positions).sum(1) / rel.sum(1).clamp(min=1)).numpy()
    n = max(len(others), 1)
    return {**dict(zip(_asr_keys(), [*(hits.sum(0) / n).tolist(), float(ap.sum() / n)])),
            "asr_queries": len(others)}


def chance_targeted_metrics(q_pids, g_pids, q_camids, g_camids, target: int) -> dict:
    """:func:`targeted_metrics` under a uniformly random ranking (:mod:`~privreid.evaluation.chance`'s
    expectations): per query, with ``N`` items it may match and ``m`` of the target, ``asr@k = 1 - prod_{j<k}
    (N - m - j) / (N - j)`` and ``E[AP] = H_N / N + (m - 1) (N - H_N) / (N (N - 1))`` (0 for ``m = 0``)."""
    from privreid.evaluation.chance import _RANKS, _expected_ap, _image_cmc

    q_pids, g_pids, q_camids = np.asarray(q_pids), np.asarray(g_pids), np.asarray(q_camids)
    others = q_pids != target
    allowed = ~removed_matches(q_pids[others], g_pids, q_camids[others], g_camids)
    per_query = []
    for total, positives in zip(allowed.sum(1).tolist(), (allowed & (g_pids[None, :] == target)).sum(1).tolist()):
        cmc = dict(zip(_RANKS, _image_cmc(total, positives)))
        per_query.append([cmc[k] for k in ASR_RANKS] + [_expected_ap(total, positives) if positives else 0.0])
    means = np.mean(per_query, axis=0).tolist() if per_query else [0.0] * (len(ASR_RANKS) + 1)
    return {**dict(zip(_asr_keys(), means)), "asr_queries": int(others.sum())}


def backdoor_metrics(clean_qf, triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, target: int | None = None,
                     metric: str = "euclidean", held: np.ndarray | None = None) -> dict:
    """Clean R1 / mAP, the triggered queries' mAP and its drop (evasion), and with ``target`` the targeted metrics.

    Returns ``clean_rank1``, ``clean_mAP``, ``triggered_rank1``, ``triggered_mAP``, ``evasion_mAP_drop`` (clean minus
    triggered mAP) and, for a target identity, :func:`targeted_metrics` of the triggered queries (``asr``, ``asr@5``,
    ``asr@10``, ``targeted_mAP``, ``asr_queries``); fractions in ``[0, 1]``.  ``held`` (a gallery mask: the attacker's
    own training images of the target) adds the same targeted metrics on the gallery without them, suffixed
    ``_clean_gallery`` (None when no image of the target is left).
    """
    q_pids, g_pids, q_camids, g_camids = map(np.asarray, (q_pids, g_pids, q_camids, g_camids))
    if target is not None and target not in set(g_pids.tolist()):
        raise ConfigError(f"target identity {target} is not in the gallery")
    finite = all(bool(torch.isfinite(torch.as_tensor(f)).all()) for f in (clean_qf, triggered_qf, gf))
    if not finite:
        warnings.warn("the model's features contain NaN or infinite values, so it cannot rank; reporting the "
                      "backdoor metrics at chance level (the expectation under a uniformly random ranking)",
                      NonFiniteFeaturesWarning, stacklevel=2)
        out = chance_backdoor_metrics(q_pids, g_pids, q_camids, g_camids, target)
    else:
        clean = evaluate(clean_qf, gf, q_pids, g_pids, q_camids, g_camids, metric=metric)
        triggered = evaluate(triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, metric=metric)
        out = {"clean_rank1": clean["rank1"], "clean_mAP": clean["mAP"], "triggered_rank1": triggered["rank1"],
               "triggered_mAP": triggered["mAP"], "evasion_mAP_drop": clean["mAP"] - triggered["mAP"]}
        if target is not None:
            out.update(targeted_metrics(triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, target, metric))
    if target is not None and held is not None:
        kept = np.flatnonzero(~np.asarray(held, dtype=bool))
        if target not in set(g_pids[kept].tolist()):
            found = dict.fromkeys(_asr_keys())
        elif finite:
            found = targeted_metrics(triggered_qf, torch.as_tensor(gf)[kept], q_pids, g_pids[kept], q_camids,
                                     g_camids[kept], target, metric)
        else:
            found = chance_targeted_metrics(q_pids, g_pids[kept], q_camids, g_camids[kept], target)
        out.update({key + CLEAN_GALLERY: found[key] for key in _asr_keys()})
    return out


def chance_backdoor_metrics(q_pids: np.ndarray, g_pids: np.ndarray, q_camids: np.ndarray, g_camids: np.ndarray,
                            target: int | None = None) -> dict:
    """:func:`backdoor_metrics` of a model that cannot rank (non-finite features), as the evaluation scores one
    (:func:`~privreid.evaluation.chance.chance_metrics`): the expectation under a uniformly random ranking, flagged
    ``non_finite_features``.  Clean and triggered queries are then alike (no mAP drop); the targeted metrics are
    :func:`chance_targeted_metrics`."""
    chance = chance_metrics(q_pids, g_pids, q_camids, g_camids)
    out = {"clean_rank1": chance["rank1"], "clean_mAP": chance["mAP"], "triggered_rank1": chance["rank1"],
           "triggered_mAP": chance["mAP"], "evasion_mAP_drop": 0.0, "non_finite_features": True}
    if target is not None:
        out.update(chance_targeted_metrics(q_pids, g_pids, q_camids, g_camids, target))
    return out


def evaluate_backdoor(model: torch.nn.Module, testset: TestSet, backdoor: Any, *, height: int,
                      width: int, device: torch.device | str = "cpu", flip: bool = False, metric: str = "euclidean",
                      batch_size: int = 128, progress: bool = False) -> dict | None:
    """:func:`backdoor_metrics` of ``model`` with ``backdoor``'s whole trigger stamped on every query of ``testset``.

    ``backdoor`` is a run's :class:`~privreid.malicious_clients.backdoor.RecordedBackdoor` (its ``trigger``,
    ``goal``, ``target``, ``target_domain`` and ``held_images``, the gallery images of the target the attacker
    trained on: the ``_clean_gallery`` metrics leave them out).  A targeted backdoor is measured on its target's
    test set only (None for another test set: its gallery does not hold the target); evasion on any image test set.
    """
    if backdoor.goal == "targeted" and testset.name != backdoor.target_domain:
        return None
    if testset.tracklets is not None:
        raise ConfigError(f"the backdoor's trigger is stamped on images; {testset.name} holds video tracklets")
    extract = dict(height=height, width=width, device=device, flip=flip, batch_size=batch_size, progress=progress)
    clean, q_pids, q_camids = sample_features(model, testset, testset.query, **extract)
    triggered, _, _ = sample_features(model, testset, stamped_samples(testset.query, backdoor.trigger, height, width),
                                      **extract)
    gallery, g_pids, g_camids = sample_features(model, testset, testset.gallery, **extract)
    held = np.array([path in backdoor.held_images for path, _, _ in testset.gallery], dtype=bool)
    return backdoor_metrics(clean, triggered, gallery, q_pids, g_pids, q_camids, g_camids, target=backdoor.target,
                            metric=metric, held=held if backdoor.goal == "targeted" else None)


def backdoor_columns(measured: dict) -> dict:
    """A table row of :func:`backdoor_metrics`'s output: clean and triggered R1 / mAP, the mAP drop, the ASR at
    ranks 1, 5, 10 and the targeted mAP on the whole gallery, and the rank-1 ASR on the gallery without the
    attacker's images of the target ("ASR clean gallery"); None, shown as '-', for an evasion backdoor."""
    return {"clean R1": measured["clean_rank1"], "clean mAP": measured["clean_mAP"],
            "triggered R1": measured["triggered_rank1"], "triggered mAP": measured["triggered_mAP"],
            "mAP drop": measured["evasion_mAP_drop"],
            **{key.replace("asr", "ASR").replace("targeted_mAP", "tmAP"): measured.get(key) for key in _asr_keys()},
            "ASR clean gallery": measured.get("asr" + CLEAN_GALLERY)}


def durability(curve: list[tuple[int, float]], stop: int | None = None) -> dict:
    """How long a backdoor lasts, from its ASR per evaluated round ``curve`` (``(round, asr)``, rounds rising)
    and the last attacked round ``stop`` (None: the attack never stops).

    ``asr_peak`` / ``asr_peak_round``: the highest ASR up to ``stop`` (the first such round; the first evaluated
    round when none is up to ``stop``); ``asr_last`` /
    ``asr_last_round``: the last evaluated round's.  With ``stop``: ``asr_after_stop``, the ASR at the last
    evaluated round after ``stop`` (None if none), and ``rounds_to_half_peak``, the rounds from ``stop`` to the
    first evaluated round after it whose ASR is below half the peak (None if none is, or the peak is 0).
    """
    if not curve:
        return {}
    attacked = [(r, a) for r, a in curve if stop is None or r <= stop] or curve[:1]
    peak_round, peak = max(attacked, key=lambda ra: (ra[1], -ra[0]))
    out = {"asr_peak": peak, "asr_peak_round": peak_round, "asr_last": curve[-1][1], "asr_last_round": curve[-1][0]}
    if stop is not None:
        after = [(r, a) for r, a in curve if r > stop]
        below = [r for r, a in after if a < peak / 2]
        out.update({"asr_after_stop": after[-1][1] if after else None,
                    "rounds_to_half_peak": below[0] - stop if below and peak > 0 else None})
    return out


def backdoor_records(models, backdoors, testsets: list[TestSet], *, device: torch.device | str = "cpu",
                     progress: bool = False) -> list[dict]:
    """Each model under each recorded trigger (``privreid compare --suite poisoning``): one row per (trigger, model,
    test set) that :func:`evaluate_backdoor` measures, with :func:`backdoor_columns`.

    ``models``: ``(label, network, (height, width))``; ``backdoors``: ``(label of the run that trained with it,
    RecordedBackdoor)``.  A model trained without the trigger is the reference: its ASR is what the trigger does
    by itself.
    """
    rows = []
    for run, backdoor in backdoors:
        for label, net, (height, width) in models:
            for testset in testsets:
                measured = evaluate_backdoor(net, testset, backdoor, height=height, width=width, device=device,
                                             progress=progress)
                if measured is not None:
                    rows.append({"trigger of": run, "model": label, "testset": testset.name,
                                 **backdoor_columns(measured)})
    return rows
