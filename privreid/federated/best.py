"""The ``best`` block of ``summary.json``: which evaluations of the global model a run reports.

FedPav (Zhuang et al., paper 004, Sec. 4.2.2) reports "the accuracy by averaging the three best global models
throughout training, evaluated every ten rounds".  Its authors' plotting code (cap-ntu/FedReID,
``experiments/plot_Rank1_mAP_bar.py``) ranks the evaluation rounds by the mean rank-1 over the four large training
datasets and averages every dataset's rank-1 and mAP over the three selected rounds.

privreid's rule, ``--report-best K`` (:func:`best_block`):

* ``K = 1`` (default): the last evaluation of the global model, the numbers of ``global_seen`` / ``global_unseen`` at
  the top of ``summary.json``.
* ``K > 1``: every round at which the global model was evaluated gets the score **mean rank-1 over the seen test
  sets** (privreid has no notion of "large" datasets, so all count; a federation without seen test sets scores on all
  its test sets).  The ``K`` highest-scoring rounds are selected (ties: the earlier round; all rounds when fewer than
  ``K`` were evaluated).  Every metric of every test set, seen and unseen, is then the mean over the selected rounds,
  and ``global_seen`` / ``global_unseen`` the means over test sets.  The unseen numbers are thus reported at rounds
  chosen on the seen test sets, never on the unseen ones.

Methods without a global model (standalone) have no ``best`` block (``None``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from privreid.evaluation.metric_registry import summary_keys

#: what ``K > 1`` ranks the evaluation rounds by (recorded in the block)
RANKED_BY = "mean global seen rank1"


def _mean(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    return {k: float(np.mean([r[k] for r in records])) for k in summary_keys()}


def round_scores(metrics: Sequence[dict[str, Any]]) -> dict[int, float]:
    """Round -> its score: the mean rank-1 of the global model's seen test sets (all its test sets if none is seen)."""
    by_round: dict[int, list[dict[str, Any]]] = {}
    for m in metrics:
        if m.get("scope") == "global":
            by_round.setdefault(int(m["round"]), []).append(m)
    scores = {}
    for r, recs in by_round.items():
        seen = [m for m in recs if m["split"] == "seen"] or recs
        scores[r] = float(np.mean([m["rank1"] for m in seen]))
    return scores


def select_rounds(scores: dict[int, float], k: int) -> list[int]:
    """``k = 1``: the last round; ``k > 1``: the ``k`` best-scoring rounds (ties: earlier first), in round order."""
    if not scores:
        return []
    if k == 1:
        return [max(scores)]
    ranked = sorted(scores, key=lambda r: (-scores[r], r))
    return sorted(ranked[:k])


def best_block(metrics: Sequence[dict[str, Any]], k: int) -> dict[str, Any] | None:
    """The ``best`` block from the run's metric records (``metrics.jsonl``); ``None`` without global evaluations."""
    scores = round_scores(metrics)
    rounds = select_rounds(scores, k)
    if not rounds:
        return None
    chosen = [m for m in metrics if m.get("scope") == "global" and int(m["round"]) in rounds]
    out: dict[str, Any] = {
        "k": k,
        "selection": "last" if k == 1 else f"top-{k} by {RANKED_BY}",
        "rounds": rounds,
        "scores": {str(r): scores[r] for r in rounds},
    }
    for split in ("seen", "unseen"):
        per_testset: dict[str, dict[str, float]] = {}
        for name in dict.fromkeys(m["testset"] for m in chosen if m["split"] == split):
            per_testset[name] = _mean([m for m in chosen if m["split"] == split and m["testset"] == name])
        if per_testset:
            out[f"global_{split}"] = {key: float(np.mean([v[key] for v in per_testset.values()]))
                                      for key in summary_keys()}
            out[f"global_{split}_per_testset"] = per_testset
    return out
