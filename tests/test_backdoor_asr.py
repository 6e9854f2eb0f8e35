"""The backdoor success metric (issue 30) on a hand-built ranking."""

from __future__ import annotations

import pytest
import torch

from privreid.errors import ConfigError
from privreid.evaluation.backdoor import backdoor_metrics, targeted_metrics
from privreid.evaluation.model_eval import NonFiniteFeaturesWarning

# one-dimensional features: gallery identity 1 at 0, identity 2 at 10, identity 7 (the target) at 100,
# each seen by camera 1; queries of identities 1, 2 and 7 from camera 0
GF = torch.tensor([[0.0], [10.0], [100.0]])
G_PIDS, G_CAMS = [1, 2, 7], [1, 1, 1]
Q_PIDS, Q_CAMS = [1, 2, 7], [0, 0, 0]
CLEAN = torch.tensor([[1.0], [9.0], [99.0]])
# the trigger pulls query 1 onto the target and moves query 2 a little (6 is still nearest to identity 2)
TRIGGERED = torch.tensor([[98.0], [6.0], [99.0]])


def test_asr_counts_triggered_queries_of_other_identities_retrieving_the_target_at_rank_1():
    out = backdoor_metrics(CLEAN, TRIGGERED, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, target=7)
    assert out["asr_queries"] == 2  # the target's own query is left out
    assert out["asr"] == pytest.approx(0.5)  # query 1 retrieves 7; query 2 still retrieves 2
    # query 2 ranks 2, 1, 7: the target third, within rank 5 (AP 1/3); query 1's AP is 1
    assert out["asr@5"] == out["asr@10"] == 1.0 and out["targeted_mAP"] == pytest.approx(2 / 3)
    assert out["clean_rank1"] == pytest.approx(1.0) and out["clean_mAP"] == pytest.approx(1.0)
    assert out["triggered_rank1"] == pytest.approx(2 / 3)
    # query 1's positive is now last of 3 (AP 1/3): mAP (1/3 + 1 + 1) / 3
    assert out["triggered_mAP"] == pytest.approx(7 / 9)
    assert out["evasion_mAP_drop"] == pytest.approx(2 / 9)


def test_rank_1_follows_the_market_removal_rule_and_the_clean_model_has_no_asr():
    # a gallery image of the query's identity from the query's own camera is removed, however near it is
    assert targeted_metrics([[0.0]], [[0.0], [1.0]], [1], [1, 2], [0], [0, 1], target=2)["asr"] == 1.0
    assert backdoor_metrics(CLEAN, CLEAN, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, target=7)["asr"] == 0.0


def test_evasion_only_without_a_target_and_an_unknown_target_is_refused():
    out = backdoor_metrics(CLEAN, TRIGGERED, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS)
    assert "asr" not in out and out["evasion_mAP_drop"] == pytest.approx(2 / 9)
    with pytest.raises(ConfigError, match="target identity 5 is not in the gallery"):
        backdoor_metrics(CLEAN, TRIGGERED, GF, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, target=5)


def test_a_model_with_non_finite_features_is_scored_at_chance_and_flagged():
    """As the evaluation scores such a model: the expectation under a uniformly random ranking.  A fourth gallery
    item (identity 1, camera 0) is removed for query 1 only, so the target is 1 of 3 items it may match and 1 of 4
    for query 2: ASR (1/3 + 1/4) / 2."""
    gf = torch.tensor([[0.0], [10.0], [100.0], [float("nan")]])
    with pytest.warns(NonFiniteFeaturesWarning, match="reporting the backdoor metrics at chance level"):
        out = backdoor_metrics(CLEAN, TRIGGERED, gf, Q_PIDS, [*G_PIDS, 1], Q_CAMS, [*G_CAMS, 0], target=7)
    assert out["non_finite_features"] is True and out["asr_queries"] == 2
    assert out["asr"] == pytest.approx(7 / 24)
    # N = 3 and 4 items, one of the target: within rank 5 surely; E[AP] = H_N / N: (11/18 + 25/48) / 2
    assert out["asr@5"] == pytest.approx(1.0) and out["targeted_mAP"] == pytest.approx(163 / 288)
    # query 1: 1 positive among its 3 items; queries 2 and 7: 1 among 4 (expected rank-1 1/3, 1/4, 1/4)
    assert out["clean_rank1"] == out["triggered_rank1"] == pytest.approx((1 / 3 + 1 / 4 + 1 / 4) / 3)
    assert out["evasion_mAP_drop"] == 0.0
