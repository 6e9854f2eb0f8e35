"""Detection metrics: which clients a server defense rejected against which attacked.

A defense that selects or drops clients reports, in ``RoundResult.records``, ``{"scope": "defense", "defense": NAME,
"rejected": [names], "accepted": [names]}``.  Against the clients that attacked in the round (the positives), each such
record gives a ``scope: "detection"`` record of ``metrics.jsonl``: ``tp`` / ``fn`` (attackers rejected / accepted),
``fp`` / ``tn`` (honest clients rejected / accepted), ``tpr = tp / (tp + fn)`` (null in a round without attackers) and
``fpr = fp / (fp + tn)`` (null without honest clients)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

COUNTS = ("tp", "fp", "fn", "tn")


def _rates(counts: dict[str, int]) -> dict[str, float | None]:
    tp, fp, fn, tn = (counts[k] for k in COUNTS)
    return {"tpr": tp / (tp + fn) if tp + fn else None, "fpr": fp / (fp + tn) if fp + tn else None}


def detection_record(round_no: int, record: dict[str, Any], attacking: Iterable[str]) -> dict[str, Any]:
    """The ``scope: "detection"`` record of a defense's ``record`` in round ``round_no``."""
    attacking, rejected, accepted = set(attacking), set(record["rejected"]), set(record["accepted"])
    counts = {"tp": len(rejected & attacking), "fp": len(rejected - attacking), "fn": len(accepted & attacking),
              "tn": len(accepted - attacking)}
    return {"round": round_no, "scope": "detection", "defense": record["defense"], **counts, **_rates(counts),
            "attacking": sorted(attacking)}


def detection_totals(metrics: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per defense, the counts of every detection record of ``metrics`` summed, and their TPR / FPR."""
    totals: dict[str, dict[str, int]] = {}
    for rec in metrics:
        if rec.get("scope") == "detection":
            acc = totals.setdefault(rec["defense"], dict.fromkeys(COUNTS, 0))
            for k in COUNTS:
                acc[k] += rec[k]
    return {name: {**counts, **_rates(counts)} for name, counts in totals.items()}
