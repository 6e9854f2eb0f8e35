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
the same queries.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from .metrics import evaluate


def _distances(qf: torch.Tensor, gf: torch.Tensor, metric: str) -> torch.Tensor:
    if metric == "cosine":
        return 1 - torch.nn.functional.normalize(qf, dim=1) @ torch.nn.functional.normalize(gf, dim=1).T
    return torch.cdist(qf.double(), gf.double()).pow(2)


def rank1_pids(qf, gf, q_pids, g_pids, q_camids, g_camids, metric: str = "euclidean") -> np.ndarray:
    """The identity of each query's rank-1 gallery item (Market-1501 removal; ties: the first gallery item)."""
    qf, gf = torch.as_tensor(qf, dtype=torch.float32), torch.as_tensor(gf, dtype=torch.float32)
    q_pids, g_pids = np.asarray(q_pids), np.asarray(g_pids)
    dist = _distances(qf, gf, metric).double()
    removed = torch.as_tensor((q_pids[:, None] == g_pids[None, :])
                              & (np.asarray(q_camids)[:, None] == np.asarray(g_camids)[None, :]))
    dist[removed] = float("inf")
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
    clean = evaluate(clean_qf, gf, q_pids, g_pids, q_camids, g_camids, metric=metric)
    triggered = evaluate(triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, metric=metric)
    out = {"clean_rank1": clean["rank1"], "clean_mAP": clean["mAP"], "triggered_rank1": triggered["rank1"],
           "triggered_mAP": triggered["mAP"], "evasion_mAP_drop": clean["mAP"] - triggered["mAP"]}
    if target is not None:
        others = q_pids != target
        hits = rank1_pids(triggered_qf, gf, q_pids, g_pids, q_camids, g_camids, metric)[others] == target
        out.update({"asr": float(hits.mean()) if hits.size else 0.0, "asr_queries": int(others.sum())})
    return out
