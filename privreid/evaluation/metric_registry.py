"""The retrieval metrics, each named and defined once: rank-k (CMC), mAP and mINP.

A :class:`Metric` is a result key (``name``), a column label (``label``), how it is computed from a ranking
(``compute``, from a :class:`Ranking`: the CMC curve, the valid queries' AP and INP,
:mod:`privreid.evaluation.metrics`), whether higher is better, and where it is shown: ``summary`` metrics are
averaged over repeats, splits and clients (R1/R5/R10/mAP/mINP), ``headline`` metrics (summary ones too) are the
columns of the result tables (R1 / mAP / mINP).  :data:`RETRIEVAL_METRICS` holds them; every evaluation
(:func:`~privreid.evaluation.metrics.evaluate`, :func:`~privreid.evaluation.cross_modality.evaluate_cross_modality`)
reports each registered metric, and the tables read their columns from it.  A metric registered from outside
(``RETRIEVAL_METRICS.register(Metric(...))``) is reported and, with ``headline=True``, shown; chance-level results
(:mod:`privreid.evaluation.chance`) hold the built-ins only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privreid.registry import Registry

__all__ = ["RETRIEVAL_METRICS", "Metric", "Ranking", "headline", "metric_line", "result_keys", "summary_columns",
           "summary_keys"]


@dataclass(frozen=True)
class Ranking:
    """What a metric is computed from: ``cmc[k - 1]``, the share of valid queries whose first positive is at
    rank ``<= k``; ``ap`` and ``inp``, the valid queries' AP and INP; ``ap_queries``, the number of queries
    mAP averages over (the valid ones, or all with ``ap="devkit"``)."""

    cmc: np.ndarray
    ap: np.ndarray
    inp: np.ndarray
    ap_queries: int


@dataclass(frozen=True)
class Metric:
    """A retrieval metric: ``name`` (its result key), ``label`` (its column), ``compute(ranking) -> float``.

    ``rank``: ``k`` for a CMC point (cross-modality reads it from its own CMC curve); other metrics are means
    over queries, weighted by each query group's valid queries.
    """

    name: str
    label: str
    compute: Callable[[Ranking], float]
    higher_is_better: bool = True
    summary: bool = False
    headline: bool = False
    rank: int | None = None


def _rank_k(k: int, summary: bool, headline: bool = False) -> Metric:
    return Metric(f"rank{k}", f"R{k}", lambda r: float(r.cmc[k - 1]), summary=summary, headline=headline, rank=k)


def _builtins() -> list[Metric]:
    return [_rank_k(1, True, True), _rank_k(5, True), _rank_k(10, True), _rank_k(20, False),
            Metric("mAP", "mAP", lambda r: float(np.sum(r.ap) / r.ap_queries), summary=True, headline=True),
            Metric("mINP", "mINP", lambda r: float(np.mean(r.inp)), summary=True, headline=True)]


#: every retrieval metric by name, in reporting order
RETRIEVAL_METRICS: Registry[Metric] = Registry("metric", builtins=_builtins)


def result_keys() -> tuple[str, ...]:
    """Every metric's result key, in order."""
    return tuple(RETRIEVAL_METRICS.names())


def summary_keys() -> tuple[str, ...]:
    """The keys averaged over repeats, splits and clients (``rank1``, ``rank5``, ``rank10``, ``mAP``, ``mINP``)."""
    return tuple(key for key, _ in summary_columns())


def summary_columns() -> tuple[tuple[str, str], ...]:
    """``(key, label)`` of the summary metrics: ``("rank1", "R1"), ("rank5", "R5"), ...``."""
    return tuple((m.name, m.label) for m in RETRIEVAL_METRICS.values() if m.summary or m.headline)


def headline() -> tuple[tuple[str, str], ...]:
    """``(key, label)`` of the result tables' columns: ``("rank1", "R1"), ("mAP", "mAP"), ("mINP", "mINP")``."""
    return tuple((m.name, m.label) for m in RETRIEVAL_METRICS.values() if m.headline)


def metric_line(result: dict[str, Any]) -> str:
    """``R1 61.2% mAP 40.1% mINP 12.3%``: the headline metrics of ``result`` (those it holds), for a log line."""
    return " ".join(f"{label} {result[key]:.1%}" for key, label in headline() if key in result)
