"""Backdoor success of a retrieval backdoor (issue 30), always next to the clean R1 / mAP of the same model.

A trigger (a patch) on a query is meant to change what it retrieves:

* **targeted**: the attack success rate (ASR) is the fraction of triggered
  queries, of identities other than the target, whose rank-1 gallery match
  is the target identity.  The rank-1 match is ranked as
  :func:`~privreid.evaluation.metrics.evaluate` ranks (same metric; gallery
  items of the query's identity seen by the query's camera removed; ties by
  gallery order);
* **evasion**: the drop of the triggered queries' mAP against the same
  queries without the trigger (the triggered person leaves the top ranks).

Both take the features of the same queries without and with the trigger, so
that the clean metrics reported next to them are those of the same model on
the same queries.  :func:`evaluate_backdoor` stamps a run's recorded trigger
(:func:`privreid.malicious_clients.backdoor.recorded_backdoor`) on every query of
a test set (``privreid eval``, ``privreid compare --suite poisoning``).
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


def _distances(qf: torch.Tensor, gf: torch.Tensor, metric: str) -> torch.Tensor:
    if metric == "cosine":
        return 1 - torch.nn.functional.normalize(qf, dim=1) @ torch.nn.functional.normalize(gf, dim=1).T
    return torch.cdist(qf.double(), gf.double()).pow(2)


def removed_matches(q_pids, g_pids, q_camids, g_camids) -> np.ndarray:
    """Market-1501's removal, query x gallery: a gallery item of the query's identity seen by the query's camera."""
    return ((np.asarray(q_pids)[:, None] == np.asarray(g_pids)[None, :])
            & (np.asarray(q_camids)[:, None] == np.asarray(g_camids)[None, :]))


def rank1_pids(qf, gf, q_pids, g_pids, q_camids, g_camids, metric: str = "euclidean") -> np.ndarray:
    """The identity of each query's rank-1 gallery item (Market-1501 removal; ties: the first gallery item)."""
    qf, gf = torch.as_tensor(qf, dtype=torch.float32), torch.as_tensor(gf, dtype=torch.float32)
    g_pids = np.asarray(g_pids)
    dist = _distances(qf, gf, metric).double()
    dist[torch.as_tensor(removed_matches(q_pids, g_pids, q_camids, g_camids))] = float("inf")
    return g_pids[dist.argmin(dim=1).numpy()]


def backdoor_metrics(clean_qf, triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, target: int | None = None,
                     metric: str = "euclidean") -> dict:
    """Clean R1 / mAP, the triggered queries' mAP and its drop (evasion), and with ``target`` the ASR.

    Returns ``clean_rank1``, ``clean_mAP``, ``triggered_rank1``,
    ``triggered_mAP``, ``evasion_mAP_drop`` (clean minus triggered mAP) and,
    for a target identity, ``asr`` and ``asr_queries`` (the triggered
    queries of other identities it counts); fractions in ``[0, 1]``.
    """
    q_pids, g_pids = np.asarray(q_pids), np.asarray(g_pids)
    if target is not None and target not in set(g_pids.tolist()):
        raise ConfigError(f"target identity {target} is not in the gallery")
    if not all(bool(torch.isfinite(torch.as_tensor(f)).all()) for f in (clean_qf, triggered_qf, gf)):
        warnings.warn("the model's features contain NaN or infinite values, so it cannot rank; reporting the "
                      "backdoor metrics at chance level (the expectation under a uniformly random ranking)",
                      NonFiniteFeaturesWarning, stacklevel=2)
        return chance_backdoor_metrics(q_pids, g_pids, np.asarray(q_camids), np.asarray(g_camids), target)
    clean = evaluate(clean_qf, gf, q_pids, g_pids, q_camids, g_camids, metric=metric)
    triggered = evaluate(triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, metric=metric)
    out = {"clean_rank1": clean["rank1"], "clean_mAP": clean["mAP"], "triggered_rank1": triggered["rank1"],
           "triggered_mAP": triggered["mAP"], "evasion_mAP_drop": clean["mAP"] - triggered["mAP"]}
    if target is not None:
        others = q_pids != target
        hits = rank1_pids(triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, metric)[others] == target
        out.update({"asr": float(hits.mean()) if hits.size else 0.0, "asr_queries": int(others.sum())})
    return out


def chance_backdoor_metrics(q_pids: np.ndarray, g_pids: np.ndarray, q_camids: np.ndarray, g_camids: np.ndarray,
                            target: int | None = None) -> dict:
    """:func:`backdoor_metrics` of a model that cannot rank (non-finite features), as the evaluation scores one
    (:func:`~privreid.evaluation.chance.chance_metrics`): the expectation under a uniformly random ranking, flagged
    ``non_finite_features``.  Clean and triggered queries are then alike (no mAP drop); the ASR is the mean, over
    the queries of other identities, of the share of the target among the gallery items the query may match."""
    chance = chance_metrics(q_pids, g_pids, q_camids, g_camids)
    out = {"clean_rank1": chance["rank1"], "clean_mAP": chance["mAP"], "triggered_rank1": chance["rank1"],
           "triggered_mAP": chance["mAP"], "evasion_mAP_drop": 0.0, "non_finite_features": True}
    if target is not None:
        others = q_pids != target
        allowed = ~removed_matches(q_pids[others], g_pids, q_camids[others], g_camids)
        share = (allowed & (g_pids[None, :] == target)).sum(1) / allowed.sum(1)
        out.update({"asr": float(share.mean()) if share.size else 0.0, "asr_queries": int(others.sum())})
    return out


def evaluate_backdoor(model: torch.nn.Module, testset: TestSet, backdoor: Any, *, height: int,
                      width: int, device: torch.device | str = "cpu", flip: bool = False, metric: str = "euclidean",
                      batch_size: int = 128, progress: bool = False) -> dict | None:
    """:func:`backdoor_metrics` of ``model`` with ``backdoor``'s whole trigger stamped on every query of ``testset``.

    ``backdoor`` is a run's :class:`~privreid.malicious_clients.backdoor.RecordedBackdoor` (its ``trigger``,
    ``goal``, ``target`` and ``target_domain``).  A targeted backdoor is measured on its target's test set only
    (None for another test set: its gallery does not hold the target); evasion on any image test set.
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
    return backdoor_metrics(clean, triggered, gallery, q_pids, g_pids, q_camids, g_camids, target=backdoor.target,
                            metric=metric)


def backdoor_columns(measured: dict) -> dict:
    """A table row of :func:`backdoor_metrics`'s output: clean and triggered R1 / mAP, the mAP drop, the ASR
    (None, shown as '-', for an evasion backdoor)."""
    return {"clean R1": measured["clean_rank1"], "clean mAP": measured["clean_mAP"],
            "triggered R1": measured["triggered_rank1"], "triggered mAP": measured["triggered_mAP"],
            "mAP drop": measured["evasion_mAP_drop"], "ASR": measured.get("asr")}


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
