"""summary.json's `best` block (--report-best K): FedPav's "mean of the three best global models" (paper 004)."""

import pytest

from privreid.evaluation.metric_registry import summary_keys
from privreid.federated.best import best_block, round_scores, select_rounds
from privreid.composition import method_of
from privreid.composition import build_run


def rec(round_no, split, testset, rank1, mAP, scope="global"):
    """A metric record as the engine writes it (other metrics derived from rank-1 and mAP)."""
    return {"round": round_no, "scope": scope, "split": split, "testset": testset, "rank1": rank1,
            "rank5": rank1 + 0.1, "rank10": rank1 + 0.2, "mAP": mAP, "mINP": mAP / 2}


# rounds 10..40: seen test sets A and B, unseen U; mean seen rank-1 per round: .30, .50, .40, .50
METRICS = [
    rec(10, "seen", "A", 0.2, 0.10), rec(10, "seen", "B", 0.4, 0.20), rec(10, "unseen", "U", 0.9, 0.90),
    rec(20, "seen", "A", 0.6, 0.30), rec(20, "seen", "B", 0.4, 0.40), rec(20, "unseen", "U", 0.1, 0.05),
    rec(30, "seen", "A", 0.3, 0.50), rec(30, "seen", "B", 0.5, 0.60), rec(30, "unseen", "U", 0.3, 0.20),
    rec(40, "seen", "A", 0.5, 0.25), rec(40, "seen", "B", 0.5, 0.35), rec(40, "unseen", "U", 0.2, 0.10),
    # records that never count: local models, training metrics
    rec(30, "seen", "A", 0.99, 0.99, scope="local"), {"round": 30, "scope": "train", "client": "A", "loss": 1.0},
]


def test_rounds_are_scored_by_mean_seen_rank1_of_the_global_model():
    assert round_scores(METRICS) == pytest.approx({10: 0.3, 20: 0.5, 30: 0.4, 40: 0.5})
    # without seen test sets, all of the round's global test sets count
    assert round_scores([rec(5, "unseen", "U", 0.4, 0.1), rec(5, "unseen", "V", 0.2, 0.1)]) == pytest.approx({5: 0.3})


def test_selection_last_or_top_k_with_ties_to_the_earlier_round():
    scores = {10: 0.3, 20: 0.5, 30: 0.4, 40: 0.5}
    assert select_rounds(scores, 1) == [40]  # K = 1: the last evaluation, not the best
    assert select_rounds(scores, 2) == [20, 40]
    assert select_rounds(scores, 3) == [20, 30, 40]
    assert select_rounds({10: 0.5, 20: 0.5, 30: 0.5}, 2) == [10, 20]  # ties: earlier rounds first
    assert select_rounds(scores, 9) == [10, 20, 30, 40]  # fewer evaluations than K: all of them
    assert select_rounds({}, 3) == []


def test_top3_block_against_hand_computed_means():
    block = best_block(METRICS, 3)
    assert block["k"] == 3 and block["rounds"] == [20, 30, 40]
    assert block["selection"] == "top-3 by mean global seen rank1"
    assert block["scores"] == pytest.approx({"20": 0.5, "30": 0.4, "40": 0.5})
    # per test set: mean over rounds 20, 30, 40
    a, b, u = (block["global_seen_per_testset"]["A"], block["global_seen_per_testset"]["B"],
               block["global_unseen_per_testset"]["U"])
    assert a["rank1"] == pytest.approx((0.6 + 0.3 + 0.5) / 3) and a["mAP"] == pytest.approx((0.3 + 0.5 + 0.25) / 3)
    assert b["rank1"] == pytest.approx((0.4 + 0.5 + 0.5) / 3) and b["mINP"] == pytest.approx((0.4 + 0.6 + 0.35) / 6)
    # the unseen domain is reported at the rounds chosen on the seen ones (its own best, round 10, is not)
    assert u["rank1"] == pytest.approx((0.1 + 0.3 + 0.2) / 3) and u["rank10"] == pytest.approx(0.2 + 0.2)
    # split means: over test sets, like the top-level global_seen
    assert block["global_seen"]["rank1"] == pytest.approx((1.4 / 3 + 1.4 / 3) / 2)
    assert block["global_seen"]["mAP"] == pytest.approx((1.05 / 3 + 1.35 / 3) / 2)
    assert block["global_unseen"]["mAP"] == pytest.approx(0.35 / 3)
    assert set(block["global_seen"]) == set(summary_keys())


def test_k1_block_is_the_last_evaluation_and_no_global_model_gives_none():
    block = best_block(METRICS, 1)
    assert block["rounds"] == [40] and block["selection"] == "last"
    assert block["global_seen"]["rank1"] == pytest.approx(0.5) and block["global_seen"]["mAP"] == pytest.approx(0.3)
    assert block["global_unseen_per_testset"]["U"]["rank1"] == pytest.approx(0.2)
    local_only = [m for m in METRICS if m["scope"] != "global"]
    assert best_block(local_only, 3) is None


def test_summary_json_carries_best_and_deviations(tiny_synth, tmp_path):
    import json

    from privreid.checkpoint import load_checkpoint
    from privreid.data.catalog import federation_for_config
    from privreid.deviations import deviations
    from privreid.federated.engine import FederatedEngine

    from conftest import tiny_config

    cfg = tiny_config(tiny_synth, rounds=3, every=1, report_best=2, max_steps_per_epoch=1)
    FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, build=build_run).run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    metrics = load_checkpoint(tmp_path / "ckpt.pt")["metrics"]
    scores = round_scores(metrics)
    assert sorted(scores) == [1, 2, 3]
    assert summary["best"] == best_block(metrics, 2)  # JSON keeps floats exactly
    assert len(summary["best"]["rounds"]) == 2 and min(scores[r] for r in summary["best"]["rounds"]) >= \
        max(scores[r] for r in scores if r not in summary["best"]["rounds"])
    assert summary["deviations"] == deviations(cfg, method_of(cfg)) and "--report-best 2 (FedPav: 3" in " ".join(summary["deviations"])


def test_training_evaluations_rank_with_the_runs_metric_and_summary_says_which(tiny_synth, tmp_path):
    # issue 25: FedPav's and L2RW+'s reference code rank by cosine, Wu & Gong's by Euclidean distance; before, every
    # training-time evaluation ranked by Euclidean distance whatever the run said, and summary.json did not say.
    import json

    from privreid.data.catalog import federation_for_config
    from privreid.evaluation.model_eval import evaluate_model
    from privreid.federated.engine import FederatedEngine

    from conftest import tiny_config

    cfg = tiny_config(tiny_synth, rounds=1, metric="cosine", flip=True, ap="devkit")
    federation = federation_for_config(cfg)
    engine = FederatedEngine(cfg, federation, tmp_path, progress=False, build=build_run)
    engine.run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["evaluation"] == {"metric": "cosine", "flip": True, "ap": "devkit"}
    testset = federation.unseen[0]
    rec = next(m for m in engine.metrics if m["scope"] == "global" and m["testset"] == testset.name)
    engine._load_global()
    kwargs = dict(height=32, width=16, flip=True)
    cosine = evaluate_model(engine.model, testset, metric="cosine", ap="devkit", **kwargs)
    euclidean = evaluate_model(engine.model, testset, metric="euclidean", ap="devkit", **kwargs)
    torchreid_ap = evaluate_model(engine.model, testset, metric="cosine", **kwargs)
    assert rec["mAP"] == pytest.approx(cosine["mAP"]) and cosine["mAP"] != euclidean["mAP"]
    assert cosine["mAP"] != torchreid_ap["mAP"]
