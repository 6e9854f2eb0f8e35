"""Membership-inference metrics: ROC, AUC, TPR at a fixed low FPR, balanced accuracy, confidence intervals.

Carlini et al. (S&P 2022, Sec. III-B): judge an attack by its TPR at *low* FPR (0.1 %, 1 %) on log-log ROC
curves, not accuracy or AUC alone; :func:`summarise` reports all. The ROC is numpy's (scikit-learn is not
installed), with ``sklearn.metrics.roc_curve``'s convention; ``tpr_at_fpr`` is the largest TPR whose FPR does
not exceed the target. Intervals: stratified bootstrap for AUC and TPR@FPR, Clopper-Pearson
(:func:`binomial_interval`, scipy) for proportions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the low false-positive rates every audit reports (Carlini et al. report 0.1 % and 1 %)
FPR_TARGETS = (0.001, 0.01)


def fpr_label(fpr: float) -> str:
    """``0.001`` -> ``"0.1%"``."""
    return f"{100 * fpr:g}%"


def roc_curve(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fpr, tpr, thresholds)`` from ``(0, 0)`` (threshold +inf), one point per distinct score (member when
    score >= threshold); ``labels`` 1 for members, 0 otherwise, both present."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    if labels.shape != scores.shape or labels.ndim != 1:
        raise ValueError("labels and scores must be 1-d arrays of the same length")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("a ROC curve needs members and non-members")
    order = np.argsort(-scores, kind="mergesort")
    s, y = scores[order], labels[order]
    last_of_tie = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tp = np.cumsum(y)[last_of_tie]
    fp = (last_of_tie + 1) - tp
    fpr = np.r_[0.0, fp / n_neg]
    tpr = np.r_[0.0, tp / n_pos]
    return fpr, tpr, np.r_[np.inf, s[last_of_tie]]


def auc(fpr: np.ndarray, tpr: np.ndarray) -> float:
    """Area under the ROC curve (trapezoidal rule; ties count one half, as Mann-Whitney's U)."""
    return float(np.trapezoid(tpr, fpr))


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """The largest TPR among ROC points with FPR <= ``target``."""
    return float(tpr[fpr <= target + 1e-12].max())


def balanced_accuracy(fpr: np.ndarray, tpr: np.ndarray) -> float:
    """The best balanced accuracy ``(TPR + TNR) / 2`` over all thresholds (the attack's best single threshold)."""
    return float(np.max((tpr + 1.0 - fpr) / 2.0))


def binomial_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval of a proportion ``k / n``."""
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def _point(labels: np.ndarray, scores: np.ndarray, fprs: tuple[float, ...]) -> np.ndarray:
    fpr, tpr, _ = roc_curve(labels, scores)
    return np.array([auc(fpr, tpr), *(tpr_at_fpr(fpr, tpr, f) for f in fprs)])


def bootstrap_intervals(labels: np.ndarray, scores: np.ndarray, fprs: tuple[float, ...] = FPR_TARGETS, *,
                        samples: int = 200, confidence: float = 0.95, seed: int = 0) -> np.ndarray:
    """Percentile intervals ``(2, 1 + len(fprs))`` of ``[auc, tpr@fpr...]`` under a stratified bootstrap."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    pos, neg = np.nonzero(labels)[0], np.nonzero(~labels)[0]
    rng = np.random.default_rng(seed)
    draws = np.empty((samples, 1 + len(fprs)))
    for b in range(samples):
        idx = np.r_[rng.choice(pos, len(pos)), rng.choice(neg, len(neg))]
        draws[b] = _point(labels[idx], scores[idx], fprs)
    tail = (1 - confidence) / 2
    return np.quantile(draws, [tail, 1 - tail], axis=0)


def summarise(labels: np.ndarray, scores: np.ndarray, *, fprs: tuple[float, ...] = FPR_TARGETS,
              bootstrap: int = 200, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """One audit record's numbers (JSON-ready): AUC, TPR@FPR, balanced accuracy, counts, intervals.
    ``tpr_at_fpr_achievable``: whether ``n_nonmembers * fpr >= 1``; if not, TPR@FPR is the TPR at zero FP."""
    labels = np.asarray(labels).astype(bool)
    fpr, tpr, _ = roc_curve(labels, scores)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    out: dict[str, Any] = {
        "auc": auc(fpr, tpr),
        "tpr_at_fpr": {fpr_label(f): tpr_at_fpr(fpr, tpr, f) for f in fprs},
        "tpr_at_fpr_achievable": {fpr_label(f): n_neg * f >= 1 for f in fprs},
        "balanced_accuracy": balanced_accuracy(fpr, tpr),
        "members": n_pos,
        "nonmembers": n_neg,
    }
    if bootstrap:
        lo, hi = bootstrap_intervals(labels, scores, fprs, samples=bootstrap, confidence=confidence, seed=seed)
        out["ci"] = {"confidence": confidence, "bootstrap": bootstrap, "auc": [float(lo[0]), float(hi[0])],
                     "tpr_at_fpr": {fpr_label(f): [float(lo[i + 1]), float(hi[i + 1])] for i, f in enumerate(fprs)}}
    return out
