"""FedPav (paper 004) against its authors' code, cap-ntu/FedReID @ 81a1729: recorded fixtures.

The fixtures under ``tests/reference/fedpav/`` are numbers the reference code
computed (``tests/reference/README.md``, section "cap-ntu/FedReID (FedPav)").
Where privreid deliberately differs, the test asserts the difference and
names it.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import privreid.federated.methods.fedpav_variants as fv
from privreid.commands.sweep import base_config
from privreid.data.types import TestSet as ReIDTestSet
from privreid.errors import ConfigError, DataError
from privreid.evaluation.metrics import evaluate
from privreid.evaluation.model_eval import rank_testset
from privreid.federated.lr_schedule import base_rates, lr_factor, lr_table
from privreid.federated.registry import get_method
from privreid.federated.strategy import DataVolumeAverage, Upload, is_norm_buffer, weighted_average
from privreid.models import build_model
from privreid.composition import method_of

from conftest import tiny_config

FIXTURES = Path(__file__).parent / "reference" / "fedpav"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
VARIANTS = ("fedpav-cdw", "fedpav-kd", "fedpav-cc", "fedpav-cdw-kd", "fedpav-cdw-cc")


def fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def preset(*flags):
    return base_config(["--config", str(CONFIGS / "fedpav-paper.yaml"), *flags]).validate()


# --------------------------------------------------------------------------- (a) learning rate per round / epoch
# The reference's groups (utils.py get_optimizer): the backbone at 0.1 x lr, the classifier block (the 512-d
# bottleneck and the identity classifier) at lr; privreid's preset: backbone, neck and head.
# Tolerance: relative 1e-12 (the reference's 0.1 * 0.05 is 0.005000000000000001).

def reference_rates(ref):
    """``{privreid group: [round][local epoch] rates]}`` of a recorded reference run."""
    backbone, block = ref["lr"]["backbone"], ref["lr"]["classifier_block"]
    return {"backbone": backbone, "neck": block, "head": block}


def test_fedpav_preset_rates_per_round_are_the_references_with_one_local_epoch():
    ref = fixture("lr_schedule")["E1"]
    assert (ref["rounds"], ref["local_epochs"]) == (300, 1)
    table = lr_table(preset(), method_of(preset()))
    for group, rounds in reference_rates(ref).items():
        assert table[group] == pytest.approx([epochs[0] for epochs in rounds], rel=1e-12), group


def test_fedpav_preset_rates_per_local_epoch_are_the_references_with_five_local_epochs():
    ref = fixture("lr_schedule")["E5"]
    config = preset("--local-epochs", "5", "--rounds", "100")
    rates = base_rates(config)
    for group, rounds in reference_rates(ref).items():
        ours = [[rates[group] * lr_factor(config, r, e) for e in range(5)] for r in range(100)]
        assert np.allclose(ours, rounds, rtol=1e-12, atol=0), group
        assert lr_table(config, method_of(config))[group] == pytest.approx([epochs[0] for epochs in rounds], rel=1e-12)


def test_fedpav_preset_first_local_decay_is_the_references():
    ref = fixture("lr_schedule")["E45"]
    config = preset("--local-epochs", "45", "--rounds", "1")
    rates = base_rates(config)
    for group, rounds in reference_rates(ref).items():
        assert np.allclose([rates[group] * lr_factor(config, 0, e) for e in range(45)], rounds[0], rtol=1e-12), group


# --------------------------------------------------------------------------- (b) aggregation, BN buffers
# Tolerance: parameters absolute 1e-6 (the reference folds float32 models one at a time, privreid sums in
# float64); buffers taken from one upload: bit-identical.

def tensor(entry):
    dtype = getattr(torch, entry["dtype"])
    return torch.tensor(entry["values"], dtype=dtype).reshape(entry["shape"])


def aggregation_case():
    ref = fixture("aggregation")
    uploads = [Upload(f"c{k}", {key: tensor(e) for key, e in state.items()}, n)
               for k, (state, n) in enumerate(zip(ref["inputs"], ref["data_sizes"]))]
    return ref, uploads, {key: tensor(e) for key, e in ref["aggregated"].items()}


def assert_reference_aggregate(ours, expected):
    assert set(ours) == set(expected)
    for key, value in expected.items():
        assert ours[key].dtype == value.dtype, key
        if is_norm_buffer(key):
            assert torch.equal(ours[key], value), key
        else:
            assert torch.allclose(ours[key], value, rtol=0, atol=1e-6), key


def test_data_volume_weights_are_the_references():
    ref, uploads, _ = aggregation_case()
    assert fv.data_volume_weights(uploads) == pytest.approx(ref["weights"], rel=1e-12)


def test_bn_buffers_first_aggregates_as_the_reference(tiny_synth):
    ref, uploads, expected = aggregation_case()
    assert ref["buffers_from_first"]
    strategy = get_method("fedpav").strategy(
        tiny_config(tiny_synth, method="fedpav", method_options={"bn_buffers": "first"}))
    assert_reference_aggregate(strategy.aggregate({}, uploads).global_state, expected)
    # the variants' weighted averages (CDW weighting, cluster models, KD's average) take the option too
    assert_reference_aggregate(weighted_average(uploads, ref["data_sizes"], "first"), expected)
    cc = fv.ClusteredAverage(fv.data_volume_weights, None, None, "first")
    global_model, [(members, cluster_model)] = cc.cluster_aggregate(uploads, [0, 0, 0])
    assert members == ["c0", "c1", "c2"]
    assert_reference_aggregate(global_model, expected)
    assert_reference_aggregate(cluster_model, expected)


def test_default_averages_bn_buffers_unlike_the_reference():
    """Deviation: privreid averages BatchNorm running statistics with the parameters (``bn_buffers=average``);
    the reference keeps the first sampled client's (server.py aggregate_models averages named_parameters only)."""
    ref, uploads, expected = aggregation_case()
    ours = DataVolumeAverage().aggregate({}, uploads).global_state
    w = ref["weights"]
    for key, value in expected.items():
        if not is_norm_buffer(key):
            assert torch.allclose(ours[key], value, rtol=0, atol=1e-6), key
        elif torch.is_floating_point(value):
            assert not torch.allclose(ours[key], value, atol=1e-3), key
            mean = sum(wk * up.state[key].double() for wk, up in zip(w, uploads)).float()
            assert torch.allclose(ours[key], mean, rtol=0, atol=1e-6), key
        else:  # num_batches_tracked: the heaviest upload's (c0 here, which is also the reference's first)
            assert torch.equal(ours[key], uploads[0].state[key]) and torch.equal(ours[key], value)


def test_bn_buffers_option_is_declared_by_fedpav_and_every_variant(tiny_synth):
    for name in ("fedpav", *VARIANTS):
        method = get_method(name)
        assert method.settings(tiny_config(tiny_synth, method=name)).bn_buffers == "average"
        config = tiny_config(tiny_synth, method=name, method_options={"bn_buffers": "first"})
        assert method.settings(config).bn_buffers == "first"
    with pytest.raises(ConfigError, match="fedpav option bn_buffers must be one of average, first, got 'last'"):
        get_method("fedpav").strategy(tiny_config(tiny_synth, method_options={"bn_buffers": "last"}))
    cdw = get_method("fedpav-cdw").strategy(
        tiny_config(tiny_synth, method="fedpav-cdw", method_options={"bn_buffers": "first"}))
    assert cdw.bn_buffers == "first"
    # secure aggregation sees only a sum: it refuses a mean that takes buffers from one upload
    assert DataVolumeAverage("first").upload_weight() is None and DataVolumeAverage().upload_weight() is not None


def test_kd_average_keeps_the_first_uploads_bn_buffers():
    """KD fine-tunes in eval mode, so ``bn_buffers=first`` survives the distillation (real tiny models)."""
    torch.manual_seed(0)
    images = torch.randn(8, 3, 16, 8, generator=torch.Generator().manual_seed(1))
    uploads = []
    for k in range(2):
        model = build_model(arch="resnet18", feat_dim=8, num_classes=0).train()
        with torch.no_grad():
            model(torch.randn(4, 3, 16, 8) * (k + 1))  # distinct running statistics per upload
        uploads.append(Upload(f"c{k}", {key: v.clone() for key, v in model.state_dict().items()}, 10 + k))
    strategy = fv.DistilledAverage(fv.data_volume_weights, fv.ServerModel(dict(arch="resnet18", feat_dim=8)), images,
                                   epochs=1, batch_size=8, bn_buffers="first")
    out = strategy.aggregate({}, uploads).global_state
    buffers = [key for key in out if is_norm_buffer(key)]
    assert buffers and all(torch.equal(out[key], uploads[0].state[key]) for key in buffers)


# --------------------------------------------------------------------------- (c) CDW weights
# Tolerance: absolute 1e-6 on the distances (the reference's cosine is float32, privreid's float64); the
# weights from the reference's own distances: relative 1e-9.

def test_cosine_distances_and_cdw_weights_are_the_references():
    ref = fixture("cdw")
    for client in ref["clients"]:
        before = torch.tensor(client["before"])
        after = before @ torch.tensor(client["weight"]).T + torch.tensor(client["bias"])
        assert torch.allclose(after, torch.tensor(client["after"]), atol=1e-6)
        assert fv.cosine_distance(before, after) == pytest.approx(client["distance"], abs=1e-6)
    uploads = [Upload(f"c{k}", {}, 1, {fv.CDW_METRIC: d}) for k, d in enumerate(ref["distances"])]
    assert fv.cosine_distance_weights(uploads) == pytest.approx(ref["weights"], rel=1e-9)


# --------------------------------------------------------------------------- (d) KD rounds and settings

def test_kd_settings_are_the_references():
    ref = fixture("kd_rounds")["settings"]
    assert ref["temperature"] is None  # MSE on features: no temperature on either side
    opts = get_method("fedpav-kd").options()
    assert opts.kd_lr == pytest.approx(ref["lr"], rel=1e-12) and opts.kd_epochs == ref["epochs_per_kd"]
    assert opts.kd_batch_size == ref["batch_size"]
    assert (fv.KD_MOMENTUM, fv.KD_WEIGHT_DECAY) == (ref["momentum"], ref["weight_decay"]) and ref["nesterov"]


def test_kd_runs_every_round_unlike_the_reference(monkeypatch):
    """Deviation: privreid distils after every aggregation (paper 004 Alg. 3, Sec. 5.2); the reference code
    distils every 10th round only (main.py), 30 of 300 rounds."""
    ref = fixture("kd_rounds")
    assert ref["kd_rounds_0based"] == list(range(9, 300, 10)) == ref["evaluated_rounds_0based"]
    calls = []
    monkeypatch.setattr(fv, "distill", lambda *a, **k: calls.append(1) or [0.0])
    torch.manual_seed(0)
    state = {k: v.clone() for k, v in build_model(arch="resnet18", feat_dim=8, num_classes=0).state_dict().items()}
    strategy = fv.DistilledAverage(fv.data_volume_weights, fv.ServerModel(dict(arch="resnet18", feat_dim=8)),
                                   torch.zeros(2, 3, 16, 8), epochs=1, batch_size=2)
    for _ in range(3):  # three rounds
        strategy.aggregate({}, [Upload("c0", state, 1), Upload("c1", state, 1)])
    assert len(calls) == 3


# --------------------------------------------------------------------------- (e) ranking
# Tolerance: CMC exact up to 1e-12 (counts of queries); the devkit mAP: 1e-12 against the mean of the
# reference's per-query APs, 1e-6 against its printed mAP (6 decimals).

def ranking_case():
    ref = fixture("ranking")
    i = ref["inputs"]
    return ref, (i["qf"], i["gf"], i["q_pids"], i["g_pids"], i["q_cams"], i["g_cams"])


def test_cosine_ranking_gives_the_references_first_hits():
    ref, args = ranking_case()
    ours = evaluate(*args, metric="cosine")
    valid = [q for q in ref["per_query"] if q["valid"]]
    assert ours["num_valid_queries"] == ref["num_valid_queries"] == len(valid) == 8
    expected = [sum(q["first_hit_rank"] <= k for q in valid) / len(valid) for k in range(1, 51)]
    assert np.allclose(ours["cmc"], expected, rtol=0, atol=1e-12)


def test_reference_cmc_averages_over_all_queries_unlike_privreid():
    """Deviation: privreid's CMC is over the queries with a positive (torchreid); the reference divides the
    summed CMC by every query (evaluate.py), so its rank-k is privreid's times valid / all queries."""
    ref, args = ranking_case()
    ours = evaluate(*args, metric="cosine", ap="devkit")
    scale = ref["num_valid_queries"] / ref["num_queries"]
    for k in (1, 5, 10):
        assert ours[f"rank{k}"] * scale == pytest.approx(ref["printed"][f"rank{k}"], abs=1e-6)
        assert ours[f"rank{k}"] != pytest.approx(ref["printed"][f"rank{k}"], abs=0.05)


def test_devkit_map_is_the_references():
    ref, args = ranking_case()
    ours = evaluate(*args, metric="cosine", ap="devkit")
    assert ours["mAP"] == pytest.approx(np.mean([q["ap"] for q in ref["per_query"]]), abs=1e-12)
    assert ours["mAP"] == pytest.approx(ref["printed"]["mAP"], abs=1e-6)
    qf, gf, q_pids, g_pids, q_cams, g_cams = args
    for i, q in enumerate(ref["per_query"]):  # one query at a time: its AP
        single = (qf[i:i + 1], gf, q_pids[i:i + 1], g_pids, q_cams[i:i + 1], g_cams)
        if q["valid"]:
            assert evaluate(*single, metric="cosine", ap="devkit")["mAP"] == pytest.approx(q["ap"], abs=1e-12)
        else:
            with pytest.raises(DataError, match="no query has a positive"):
                evaluate(*single, metric="cosine", ap="devkit")
    via = rank_testset(ReIDTestSet("fixture", [], []), (torch.tensor(qf), q_pids, q_cams),
                       (torch.tensor(gf), g_pids, g_cams), metric="cosine", ap="devkit")
    assert via["mAP"] == ours["mAP"] and via["rank1"] == ours["rank1"]


def test_torchreid_map_differs_from_the_references():
    """privreid's default AP (torchreid: precision at each positive, mean over valid queries) is not the
    reference's (devkit trapezoid rule, mean over all queries) on this fixture."""
    ref, args = ranking_case()
    ours = evaluate(*args, metric="cosine")
    assert abs(ours["mAP"] - ref["printed"]["mAP"]) > 0.1
    assert ours["rank1"] == evaluate(*args, metric="cosine", ap="devkit")["rank1"]  # the CMC does not change


def test_devkit_ap_is_refused_where_it_does_not_apply():
    _, args = ranking_case()
    with pytest.raises(ConfigError, match="unknown ap 'trapezoid'"):
        evaluate(*args, metric="cosine", ap="trapezoid")
    vi = ReIDTestSet("vi", [], [], modality={})
    with pytest.raises(ConfigError, match="devkit's AP does not apply to vi"):
        rank_testset(vi, (torch.zeros(1, 2), [1], [1]), (torch.zeros(1, 2), [1], [2]), ap="devkit")
