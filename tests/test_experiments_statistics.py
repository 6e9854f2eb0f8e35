"""Seed statistics (privreid.experiments.statistics) against values computed by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from privreid.experiments.statistics import cell_statistics, describe, mean_pm_std, metric_value


def test_three_values_mean_sample_std_and_student_t_interval_by_hand():
    """1, 2, 6: mean 3; squared deviations 4 + 1 + 9 = 14, s² = 14 / 2 = 7, s = √7 = 2.6458; the 95% interval
    is 3 ± t(0.975, 2) · s / √3 with t(0.975, 2) = 4.3027 (the t table's two-sided 5% at 2 degrees of freedom):
    3 ± 4.3027 · 1.5275 = 3 ± 6.5724."""
    stats = describe([1.0, 2.0, 6.0], "mAP")
    assert stats["mAP_mean"] == 3.0 and stats["mAP_n"] == 3
    assert stats["mAP_std"] == pytest.approx(math.sqrt(7))
    assert stats["mAP_ci95_low"] == pytest.approx(3 - 6.5724, abs=1e-3)
    assert stats["mAP_ci95_high"] == pytest.approx(3 + 6.5724, abs=1e-3)


def test_one_value_has_std_zero_and_no_interval_two_values_no_interval_none_no_mean():
    assert describe([0.5]) == {"mean": 0.5, "std": 0.0, "n": 1}
    two = describe([1.0, 3.0])  # s² = (1 + 1) / 1 = 2
    assert two["std"] == pytest.approx(math.sqrt(2)) and "ci95_low" not in two
    assert describe([], "x") == {"x_mean": None, "x_std": None, "x_n": 0}
    five = describe([2.0] * 5)  # no spread: the interval is the point
    assert (five["ci95_low"], five["ci95_high"]) == (2.0, 2.0)


def _outcome(cell, seed, summary=None, status="done"):
    return SimpleNamespace(run=SimpleNamespace(cell=cell, seed=seed, name=f"{cell}-{seed}"), status=status,
                           summary=summary if status == "done" else None, error=None if status == "done" else "x")


def test_cell_statistics_groups_runs_by_cell_and_counts_failures():
    outcomes = [_outcome({"privacy.beta": 0.1}, 0, {"global_seen": {"mAP": 0.2}, "epsilon": 1.0}),
                _outcome({"privacy.beta": 0.0}, 0, {"global_seen": {"mAP": 0.5}}),
                _outcome({"privacy.beta": 0.1}, 1, {"global_seen": {"mAP": 0.4}, "epsilon": 3.0}),
                _outcome({"privacy.beta": 0.1}, 2, status="failed"),
                _outcome({"privacy.beta": 0.0}, 1, {"global_seen": {"mAP": 0.7}})]
    rows = cell_statistics(outcomes, ["global_seen.mAP", "epsilon"])
    assert [r["privacy.beta"] for r in rows] == [0.1, 0.0]  # in the order the cells first appear
    beta, plain = rows
    assert beta["global_seen.mAP_mean"] == pytest.approx(0.3) and beta["global_seen.mAP_n"] == 2
    assert beta["global_seen.mAP_std"] == pytest.approx(math.sqrt(0.02))  # ((0.1)² + (0.1)²) / 1
    assert beta["failed"] == 1 and beta["epsilon_mean"] == 2.0
    assert plain["failed"] == 0 and plain["epsilon_n"] == 0 and plain["epsilon_mean"] is None


def test_metric_value_reads_dotted_paths_and_skips_what_is_not_a_number():
    summary = {"a": {"b": 0.25}, "flag": True, "text": "x"}
    assert metric_value(summary, "a.b") == 0.25
    assert metric_value(summary, "a.c") is None and metric_value(summary, "flag") is None
    assert metric_value(summary, "text") is None and metric_value(None, "a") is None


def test_mean_pm_std_prints_the_cell():
    assert mean_pm_std(describe([0.1, 0.2, 0.3], "m"), "m", scale=100) == "20.0 ± 10.0 (n=3)"
    assert mean_pm_std(describe([0.125]), decimals=2, scale=100) == "12.50"
    assert mean_pm_std(describe([])) == "-"
