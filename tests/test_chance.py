"""Chance-level metrics (exact expectations under a uniformly random ranking) and models with non-finite features.

The expectations are checked against the real metric functions averaged over *every* permutation of small
galleries, and the engine is checked end to end with a toy method whose clients upload NaN weights.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from privreid.data.types import TestSet, VIProtocol
from privreid.evaluation.chance import chance_metrics
from privreid.evaluation.cross_modality import evaluate_cross_modality, single_shot_gallery
from privreid.evaluation.metrics import evaluate, evaluate_cuhk03
from privreid.evaluation.metric_registry import result_keys
from privreid.evaluation.model_eval import NonFiniteFeaturesWarning, rank_testset

from conftest import tiny_config
from privreid.composition import build_run

# one gallery of 6 items: identities 1 (cameras 0, 1, 1), 2 (camera 1), 3 (cameras 0, 2)
G_PIDS = np.array([1, 1, 1, 2, 3, 3])
G_CAMS = np.array([0, 1, 1, 1, 0, 2])
# queries: identity 1 from camera 0 (its camera-0 item is removed), 1 from camera 2, 3 from camera 1,
# 2 from camera 1 (its only item shares the camera: invalid, skipped)
Q_PIDS = np.array([1, 1, 3, 2])
Q_CAMS = np.array([0, 2, 1, 1])


def average_over_permutations(rank, **kwargs) -> dict:
    """Mean of ``rank(...)``'s metrics over all 720 orders of the gallery (1-D features: the order is the rank)."""
    totals: dict[str, float] = {}
    perms = list(itertools.permutations(range(len(G_PIDS))))
    for perm in perms:
        gf = torch.tensor(perm, dtype=torch.float32)[:, None]
        qf = torch.full((len(Q_PIDS), 1), -1.0)  # distance grows with the gallery item's position
        res = rank(qf, gf, Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, **kwargs)
        for key in result_keys():
            totals[key] = totals.get(key, 0.0) + res[key] / len(perms)
        totals["num_valid_queries"] = res["num_valid_queries"]
    return totals


def assert_expected(chance: dict, brute: dict) -> None:
    assert chance["num_valid_queries"] == brute["num_valid_queries"] == 3
    for key in result_keys():
        assert chance[key] == pytest.approx(brute[key], abs=1e-12), key


def test_market_rules_chance_is_the_exact_expectation_over_all_rankings():
    assert_expected(chance_metrics(Q_PIDS, G_PIDS, Q_CAMS, G_CAMS), average_over_permutations(evaluate))


def test_hand_values():
    # query 1@cam0 ranks 5 items (2 positives), 1@cam2 ranks 6 (3), 3@cam1 ranks 6 (2): R1 = mean(m / N)
    chance = chance_metrics(Q_PIDS, G_PIDS, Q_CAMS, G_CAMS)
    assert chance["rank1"] == pytest.approx((2 / 5 + 3 / 6 + 2 / 6) / 3)
    # one positive among three items: E[AP] = E[INP] = E[1 / r] = (1 + 1/2 + 1/3) / 3
    one = chance_metrics([7], [7, 8, 9], [0], [1, 1, 1])
    assert one["mAP"] == pytest.approx(11 / 18) and one["mINP"] == pytest.approx(11 / 18)
    assert one["rank1"] == pytest.approx(1 / 3) and one["rank5"] == 1.0


def test_identity_cmc_and_colocated_cameras_chance_is_exact():
    protocol = VIProtocol(cmc_by_identity=True, colocated_cameras=((2, 0),))  # camera-2 queries ignore camera 0
    assert_expected(chance_metrics(Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, protocol=protocol),
                    average_over_permutations(evaluate_cross_modality, protocol=protocol))


def test_cuhk03_chance_is_exact():
    assert_expected(chance_metrics(Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, single_gallery_shot=True),
                    average_over_permutations(evaluate_cuhk03, repeats=3))


def test_gallery_trials_use_the_real_protocols_draws():
    protocol = VIProtocol(gallery_trials=3, cmc_by_identity=True)
    chance = chance_metrics(Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, protocol=protocol, seed=4)
    per_trial = []
    for t in range(3):
        keep = single_shot_gallery(G_PIDS, G_CAMS, np.random.default_rng([4, t]))
        per_trial.append(chance_metrics(Q_PIDS, G_PIDS[keep], Q_CAMS, G_CAMS[keep],
                                        protocol=VIProtocol(cmc_by_identity=True)))
    assert chance["trials"] == 3
    for key in result_keys():
        values = [t[key] for t in per_trial]
        assert chance[key] == pytest.approx(np.mean(values)) and chance["std"][key] == pytest.approx(np.std(values))


def test_identity_cmc_chance_at_scale_matches_random_rankings():
    """80 identities of 1-8 items (quadrature with 180+ nodes), queried by the large ones, which come early.

    The exact values agree with the mean over 300 rankings by random features (each query its own ranking)
    within 4 standard errors, and lie well above the naive k / identities.
    """
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 9, size=80)
    g_pids = np.repeat(np.arange(1, 81), sizes)
    g_cams = rng.integers(0, 4, size=len(g_pids))
    q_pids = np.repeat(np.flatnonzero(sizes >= 6) + 1, 2)
    q_cams = np.full(len(q_pids), 9)
    protocol = VIProtocol(cmc_by_identity=True)
    chance = chance_metrics(q_pids, g_pids, q_cams, g_cams, protocol=protocol)
    sampled = [evaluate_cross_modality(torch.from_numpy(rng.normal(size=(len(q_pids), 8))).float(),
                                       torch.from_numpy(rng.normal(size=(len(g_pids), 8))).float(),
                                       q_pids, g_pids, q_cams, g_cams, protocol=protocol) for _ in range(300)]
    for key in ("rank5", "rank10", "rank20", "mAP", "mINP"):
        values = [s[key] for s in sampled]
        assert chance[key] == pytest.approx(np.mean(values), abs=4 * np.std(values) / math.sqrt(len(values))), key
    assert chance["rank5"] > 1.3 * 5 / 80 and chance["rank20"] > 1.3 * 20 / 80
    assert chance["rank1"] == pytest.approx(np.mean(sizes[q_pids - 1] / len(g_pids)), rel=1e-9)  # m / N


# --------------------------------------------------------------------------- rank_testset


def test_non_finite_features_are_scored_at_chance_with_a_warning():
    ts = TestSet("toy", [], [])
    gf = torch.randn(len(G_PIDS), 4)
    for bad in (float("nan"), float("inf")):
        qf = torch.randn(len(Q_PIDS), 4)
        qf[1, 2] = bad
        with pytest.warns(NonFiniteFeaturesWarning, match="toy: the model's features contain NaN or infinite"):
            res = rank_testset(ts, (qf, Q_PIDS, Q_CAMS), (gf, G_PIDS, G_CAMS))
        assert res == {**chance_metrics(Q_PIDS, G_PIDS, Q_CAMS, G_CAMS), "non_finite_features": True}
    vi = TestSet("vi", [], [], modality={}, vi_protocol=VIProtocol(gallery_trials=2, cmc_by_identity=True))
    with pytest.warns(NonFiniteFeaturesWarning):
        res = rank_testset(vi, (torch.full((4, 4), float("nan")), Q_PIDS, Q_CAMS), (gf, G_PIDS, G_CAMS), seed=3)
    assert res["trials"] == 2 and res == {**chance_metrics(Q_PIDS, G_PIDS, Q_CAMS, G_CAMS, protocol=vi.vi_protocol,
                                                           seed=3), "non_finite_features": True}


def test_huge_finite_features_rank_as_their_scaled_copies():
    ts = TestSet("toy", [], [])
    torch.manual_seed(0)
    qf, gf = torch.randn(len(Q_PIDS), 4), torch.randn(len(G_PIDS), 4)
    expected = rank_testset(ts, (qf, Q_PIDS, Q_CAMS), (gf, G_PIDS, G_CAMS))
    assert rank_testset(ts, (qf * 2.0 ** 100, Q_PIDS, Q_CAMS), (gf * 2.0 ** 100, G_PIDS, G_CAMS)) == expected
    assert "non_finite_features" not in expected


# --------------------------------------------------------------------------- end to end


def test_a_run_whose_model_turns_nan_reports_chance_and_writes_no_checkpoint(tiny_synth, tmp_path, request):
    """The round that made the weights non-finite is evaluated (at chance, flagged) before the run stops; no
    checkpoint holds non-finite weights (issue 26: the kept checkpoint is the last finite one, here none)."""
    from privreid.data.catalog import federation_for_config
    from privreid.federated.divergence import TrainingDiverged
    from privreid.evaluation.cross_modality import mode_split
    from privreid.federated import registry
    from privreid.federated.client import SupervisedUpdate
    from privreid.federated.engine import FederatedEngine
    from privreid.federated.policy import CLASSIFIER_LOCAL
    from privreid.federated.strategy import DataVolumeAverage

    class PoisonedUpdate(SupervisedUpdate):
        """Trains, then writes NaN into a shared weight (as a diverged or over-noised client would)."""

        def __call__(self, ctx):
            metrics = super().__call__(ctx)
            with torch.no_grad():
                ctx.model.backbone.conv1.weight[0, 0, 0, 0] = float("nan")
            return metrics

    registry.register(registry.Method(
        name="nan-toy", summary="test only", policy=CLASSIFIER_LOCAL, make_client_update=PoisonedUpdate,
        make_strategy=lambda config, model_config: DataVolumeAverage()))
    request.addfinalizer(lambda: registry.unregister("nan-toy"))
    cfg = tiny_config(tiny_synth, "nan-toy", rounds=1)
    fed = federation_for_config(cfg)
    with pytest.warns(NonFiniteFeaturesWarning), pytest.raises(TrainingDiverged, match="non-finite weights"):
        FederatedEngine(cfg, fed, tmp_path, progress=False, build=build_run).run()
    assert not (tmp_path / "ckpt.pt").exists() and not (tmp_path / "summary.json").exists()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if r["scope"] == "global"]
    assert {r["testset"] for r in evaluated} == {ts.name for ts in fed.seen + fed.unseen}
    for rec in evaluated:
        assert rec["non_finite_features"] is True
        ts = next(t for t in fed.seen + fed.unseen if t.name == rec["testset"])
        query, gallery = mode_split(ts)
        labels = [(np.array([p for _, p, _ in s]), np.array([c for _, _, c in s])) for s in (query, gallery)]
        chance = chance_metrics(labels[0][0], labels[1][0], labels[0][1], labels[1][1])
        assert {k: rec[k] for k in result_keys()} == pytest.approx({k: chance[k] for k in result_keys()})



def test_summary_flags_a_test_set_whose_features_were_not_finite(tiny_synth, tmp_path):
    """A model whose weights are finite can still give non-finite features (a BatchNorm running variance pushed
    below zero by a boosted upload): ``summary.json`` keeps the flag beside that test set's chance-level numbers."""
    from privreid.data.catalog import federation_for_config
    from privreid.federated.engine import FederatedEngine

    cfg = tiny_config(tiny_synth, rounds=1)
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, build=build_run)
    scores = dict.fromkeys(result_keys(), 0.25)
    engine.metrics = [{"round": 1, "scope": "global", "split": "seen", "testset": "synthA", **scores},
                      {"round": 1, "scope": "global", "split": "seen", "testset": "synthB", **scores,
                       "non_finite_features": True}]
    per_testset = engine.summary(0.0)["global_seen_per_testset"]
    assert "non_finite_features" not in per_testset["synthA"]
    assert per_testset["synthB"] == {**{k: 0.25 for k in ("rank1", "rank5", "rank10", "mAP", "mINP")},
                                     "non_finite_features": True}
