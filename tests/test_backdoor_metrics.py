"""Backdoor metrics of issue 43 on hand-built rankings: ASR at rank k, targeted mAP, the gallery without the
attacker's images of the target, durability."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from privreid.evaluation.backdoor import backdoor_columns, backdoor_metrics, durability, targeted_metrics

# one-dimensional gallery at x = 0..8; identity 7 (the target) at x = 3 and x = 8, identity 5 at x = 0 (camera 0)
# and x = 6; every other item camera 1
GF = torch.arange(9.0)[:, None]
G_PIDS, G_CAMS = [5, 1, 2, 7, 3, 4, 5, 6, 7], [0, 1, 1, 1, 1, 1, 1, 1, 1]
# query A: identity 5, camera 0, at x = 0 (its own item at x = 0 is removed); B: identity 1, camera 1, at x = 8.4
# (its own item at x = 1 is removed); C: the target's own query, left out
QF = torch.tensor([[0.0], [8.4], [3.0]])
Q_PIDS, Q_CAMS = [5, 1, 7], [0, 1, 0]


def test_asr_at_k_and_targeted_map_rank_the_target_as_the_only_relevant_identity():
    """A ranks x = 1, 2, 3 (target), ..., 8 (target): first hit 3rd, AP (1/3 + 2/8) / 2 = 7/24.
    B ranks x = 8 (target), 7, 6, 5, 4, 3 (target), ...: first hit 1st, AP (1/1 + 2/6) / 2 = 2/3."""
    out = targeted_metrics(QF, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, target=7)
    assert out["asr_queries"] == 2
    assert out["asr"] == pytest.approx(1 / 2) and out["asr@5"] == out["asr@10"] == 1.0
    assert out["targeted_mAP"] == pytest.approx((7 / 24 + 2 / 3) / 2)
    # A from camera 1 keeps x = 0 and loses x = 6 (identity 5 on camera 1): the target 4th and 8th, AP 1/4
    moved = targeted_metrics(QF, GF, Q_PIDS, G_PIDS, [1, 1, 0], G_CAMS, target=7)
    assert moved["asr@5"] == 1.0 and moved["targeted_mAP"] == pytest.approx((1 / 4 + 2 / 3) / 2)


def test_asr_at_5_and_at_10_differ_when_the_target_is_7th():
    gf, g_pids = torch.arange(10.0)[:, None], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    out = targeted_metrics([[0.0]], gf, [11], g_pids, [0], [1] * 10, target=7)
    assert (out["asr"], out["asr@5"], out["asr@10"]) == (0.0, 0.0, 1.0)
    assert out["targeted_mAP"] == pytest.approx(1 / 7)


def test_random_features_match_the_definition_query_by_query_in_chunks():
    """Random features, no removal (distinct cameras), three queries per chunk: each query's AP and first hit from
    a plain loop over its ranking (the definition)."""
    rng = np.random.default_rng(0)
    qf, gf = rng.normal(size=(7, 4)), rng.normal(size=(30, 4))
    g_pids = rng.integers(1, 5, size=30)
    out = targeted_metrics(qf, gf, [9] * 7, g_pids, [0] * 7, [1] * 30, target=2, chunk=3)
    aps, firsts = [], []
    for q in qf:
        order = np.argsort(((gf - q) ** 2).sum(1), kind="stable")
        hits = [rank for rank, i in enumerate(order, 1) if g_pids[i] == 2]
        aps.append(np.mean([n / rank for n, rank in enumerate(hits, 1)]))
        firsts.append(hits[0])
    assert out["targeted_mAP"] == pytest.approx(np.mean(aps))
    assert [out["asr"], out["asr@5"], out["asr@10"]] == [np.mean(np.array(firsts) <= k) for k in (1, 5, 10)]


def test_the_clean_gallery_leaves_out_the_attackers_images_of_the_target():
    """Without x = 8 (held): A's only target is 3rd (AP 1/3); B ranks 7, 6, 5, 4, 3 (target): 5th (AP 1/5)."""
    held = np.array([False] * 8 + [True])
    out = backdoor_metrics(QF, QF, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, target=7, held=held)
    assert out["asr"] == pytest.approx(1 / 2)  # the whole gallery, as before
    assert out["asr_clean_gallery"] == 0.0 and out["asr@5_clean_gallery"] == 1.0
    assert out["targeted_mAP_clean_gallery"] == pytest.approx((1 / 3 + 1 / 5) / 2)
    every = backdoor_metrics(QF, QF, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, target=7,
                             held=np.array(G_PIDS) == 7)  # nothing of the target left: not measurable
    assert every["asr_clean_gallery"] is None and every["targeted_mAP_clean_gallery"] is None
    columns = backdoor_columns(out)
    assert (columns["ASR"], columns["ASR@5"], columns["ASR clean gallery"]) == (out["asr"], 1.0, 0.0)
    assert backdoor_columns(backdoor_metrics(QF, QF, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS))["ASR"] is None


def test_durability_reads_the_peak_the_asr_after_the_attack_and_the_rounds_to_half_the_peak():
    curve = [(1, 0.1), (2, 0.6), (3, 0.8), (4, 0.5), (5, 0.3), (6, 0.2)]
    assert durability(curve, stop=3) == {"asr_peak": 0.8, "asr_peak_round": 3, "asr_last": 0.2, "asr_last_round": 6,
                                         "asr_after_stop": 0.2, "rounds_to_half_peak": 2}  # round 5: 0.3 < 0.4
    # the peak within the window only (rounds 1-2: 0.6); the first round after it below 0.3 is 6, 4 rounds on
    assert durability(curve, stop=2)["asr_peak"] == 0.6 and durability(curve, stop=2)["rounds_to_half_peak"] == 4
    assert durability(curve) == {"asr_peak": 0.8, "asr_peak_round": 3, "asr_last": 0.2, "asr_last_round": 6}
    lasting = durability([(1, 0.5), (2, 0.9), (3, 0.9)], stop=1)
    assert lasting["asr_after_stop"] == 0.9 and lasting["rounds_to_half_peak"] is None
    assert durability([(2, 0.4)], stop=2)["asr_after_stop"] is None and durability([]) == {}


def test_the_suite_reads_each_backdoor_runs_asr_per_round_and_draws_it(tmp_path):
    from privreid.comparison import backdoor_rounds
    from privreid.reporting.suite import plot_asr_rounds

    lines = [{"round": 1, "scope": "global", "split": "seen", "testset": "synthC", "mAP": 0.3},
             {"round": 1, "scope": "backdoor", "testset": "synthC", "asr": 0.25, "asr_clean_gallery": 0.0,
              "triggered_mAP": 0.2, "clean_mAP": 0.3},
             {"round": 2, "scope": "backdoor", "testset": "synthC", "asr": 0.5, "asr_clean_gallery": None,
              "triggered_mAP": 0.1, "clean_mAP": 0.3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    rows = backdoor_rounds("poisoned", tmp_path / "metrics.jsonl")
    assert [(r["run"], r["round"], r["asr"], r["asr_clean_gallery"]) for r in rows] == [
        ("poisoned", 1, 0.25, 0.0), ("poisoned", 2, 0.5, None)]
    assert backdoor_rounds("copied", tmp_path / "elsewhere" / "metrics.jsonl") == []
    assert plot_asr_rounds(rows, tmp_path / "asr.png").stat().st_size > 0


def test_durability_in_summary_reads_the_attack_window_of_the_settings():
    from privreid.malicious_clients import get_malicious_client

    metrics = [{"round": r, "scope": "backdoor", "testset": "synthC", "asr": a}
               for r, a in [(1, 0.6), (2, 0.8), (3, 0.3)]] + [{"round": 3, "scope": "global", "testset": "synthC"},
                                                              {"round": 3, "scope": "backdoor", "testset": "synthB",
                                                               "asr": 0.0}]
    backdoor = get_malicious_client("backdoor")
    for window in ("1:2", (1, 2)):
        assert backdoor.outcome(metrics, {"target_domain": "synthC", "rounds": window})["durability"] == {
            "asr_peak": 0.8, "asr_peak_round": 2, "asr_last": 0.3, "asr_last_round": 3, "asr_after_stop": 0.3,
            "rounds_to_half_peak": 1}
    assert "asr_after_stop" not in backdoor.outcome(metrics, {"target_domain": "synthC", "rounds": "2:"})["durability"]
    assert backdoor.outcome(metrics, {"target_domain": "synthA"}) == {}  # nothing recorded on the target's test set
