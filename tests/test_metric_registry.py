"""The metric registry (privreid.evaluation.metric_registry): each retrieval metric named and defined once, and a
metric registered from outside reported by every evaluation and shown by the table writers."""

from __future__ import annotations

import math

import numpy as np
import torch

from privreid.evaluation.chance import chance_metrics
from privreid.evaluation.cross_modality import evaluate_cross_modality
from privreid.evaluation.metric_registry import (RETRIEVAL_METRICS, Metric, headline, metric_line, result_keys,
                                                 summary_keys)
from privreid.evaluation.metrics import evaluate
from privreid.comparison import comparison_rows
from privreid.io import format_table


def _ranking_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    q_pids, g_pids = np.repeat(np.arange(1, 9), 2), np.repeat(np.arange(1, 9), 4)
    q_cams, g_cams = np.zeros(len(q_pids), dtype=int), np.tile([0, 1, 1, 1], 8)
    qf = torch.as_tensor(rng.normal(size=(len(q_pids), 8)), dtype=torch.float32)
    gf = torch.as_tensor(rng.normal(size=(len(g_pids), 8)), dtype=torch.float32)
    return qf, gf, q_pids, g_pids, q_cams, g_cams


def test_the_builtin_metrics_in_their_order():
    assert result_keys() == ("rank1", "rank5", "rank10", "rank20", "mAP", "mINP")
    assert summary_keys() == ("rank1", "rank5", "rank10", "mAP", "mINP")
    assert headline() == (("rank1", "R1"), ("mAP", "mAP"), ("mINP", "mINP"))
    assert all(m.higher_is_better for m in RETRIEVAL_METRICS.values())


def test_a_registered_metric_is_reported_and_shown():
    with RETRIEVAL_METRICS.restoring():
        RETRIEVAL_METRICS.register(Metric("rank3", "R3", lambda r: float(r.cmc[2]), headline=True, rank=3))
        res = evaluate(*_ranking_problem())
        assert res["rank3"] == float(res["cmc"][2]) and res["rank1"] <= res["rank3"] <= res["rank5"]
        vi = evaluate_cross_modality(*_ranking_problem())
        assert vi["rank3"] == res["rank3"]
        assert math.isnan(chance_metrics(*_ranking_problem()[2:])["rank3"])  # no chance level is known for it
        row = comparison_rows("model", res, None)
        assert row["seen R3"] == res["rank3"] and "unseen R3" in row
        assert "seen R3" in format_table([row]) and f"R3 {res['rank3']:.1%}" in metric_line(res)
        assert summary_keys()[-1] == "rank3"  # a headline metric is a summary one: averaged, in eval's table
    assert "rank3" not in result_keys() and "rank3" not in evaluate(*_ranking_problem())


def test_a_registered_metric_is_in_the_api_result(tiny_synth):
    import privreid
    from privreid.models import build_model

    torch.manual_seed(0)
    model = build_model(arch="resnet18", feat_dim=32, num_classes=0).eval()
    with RETRIEVAL_METRICS.restoring():
        RETRIEVAL_METRICS.register(Metric("rank3", "R3", lambda r: float(r.cmc[2]), headline=True, rank=3))
        result = privreid.evaluate(model, str(tiny_synth), height=32, width=16)
    for numbers in result.testsets.values():
        assert numbers["rank1"] <= numbers["rank3"] <= numbers["rank5"]
