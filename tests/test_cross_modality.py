"""Cross-modality evaluation: modes, VI protocols vs hand computations, trials, and video features (Eq. 9)."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from privreid.data import (
    INFRARED,
    VISIBLE,
    SequenceDataset,
    TestSet,
    VIProtocol,
    build_transforms,
)
from privreid.data.catalog import resolve_datasets
from privreid.data.formats import read_image
from privreid.data.partition import as_test_set
from privreid.data.synthetic_vi import SynthVIConfig, generate_synthetic_vi
from privreid.data.torch_dataset import frame_indices
from privreid.errors import ConfigError, DataError
from privreid.evaluation.cross_modality import (
    IR_TO_VISIBLE,
    VISIBLE_TO_IR,
    TemporalMean,
    evaluate_cross_modality,
    mode_split,
    single_shot_gallery,
    temporal_mean,
)
from privreid.evaluation.metric_registry import result_keys
from privreid.evaluation.metrics import evaluate
from privreid.evaluation.model_eval import evaluate_model, sample_features

SMALL = SynthVIConfig(num_entities=1, ids_per_entity=2, test_ids_per_entity=4, height=32, width=16)


def feats(*values):
    return torch.tensor([[float(v)] for v in values])


# --------------------------------------------------------------------------- modes


def sided_testset():
    modality = {"ir1": INFRARED, "ir2": INFRARED, "vis1": VISIBLE, "vis2": VISIBLE}
    # a visible sample misplaced on the query side and an infrared one on the gallery side
    return TestSet("t", query=[("ir1", 1, 0), ("vis2", 2, 1)], gallery=[("vis1", 1, 1), ("ir2", 2, 0)],
                   modality=modality)


def test_modes_restrict_query_and_gallery_modality():
    ts = sided_testset()
    assert mode_split(ts) == ([("ir1", 1, 0)], [("vis1", 1, 1)])
    assert mode_split(ts, IR_TO_VISIBLE) == mode_split(ts)
    assert mode_split(ts, VISIBLE_TO_IR) == ([("vis1", 1, 1)], [("ir1", 1, 0)])  # sides swapped


def test_mode_errors():
    ts = sided_testset()
    with pytest.raises(ConfigError, match="unknown evaluation mode"):
        mode_split(ts, "thermal-to-visible")
    with pytest.raises(DataError, match="no modality, e.g. vis9"):
        mode_split(replace(ts, gallery=ts.gallery + [("vis9", 3, 1)]))
    with pytest.raises(DataError, match="no visible gallery"):
        mode_split(replace(ts, gallery=[("ir2", 2, 0)]))
    plain = TestSet("rgb", [("a", 1, 0)], [("b", 1, 1)])
    assert mode_split(plain) == (plain.query, plain.gallery)
    with pytest.raises(ConfigError, match="no modality information"):
        mode_split(plain, VISIBLE_TO_IR)


# --------------------------------------------------------------------------- ranking rules


def test_default_protocol_is_the_market_protocol():
    rng = np.random.default_rng(0)
    qf, gf = rng.normal(size=(12, 8)), rng.normal(size=(30, 8))
    q_pids, g_pids = rng.integers(0, 6, 12), rng.integers(0, 6, 30)
    q_cams, g_cams = rng.integers(0, 3, 12), rng.integers(0, 3, 30)
    ours = evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams)
    ref = evaluate(qf, gf, q_pids, g_pids, q_cams, g_cams)
    assert {k: ours[k] for k in result_keys()} == pytest.approx({k: ref[k] for k in result_keys()})
    assert np.allclose(ours["cmc"], ref["cmc"]) and ours["num_valid_queries"] == ref["num_valid_queries"]
    assert ours["trials"] == 1 and "std" not in ours


def test_colocated_cameras_ignore_the_whole_other_camera():
    # q0: identity 1 in camera 2 (SYSU cam3); its closest gallery item is a negative of camera 1 (SYSU cam2)
    qf, q_pids, q_cams = feats(0.0, 0.32), [1, 3], [2, 5]
    gf = feats(0.1, 0.2, 0.3, 0.5)
    g_pids, g_cams = [2, 1, 3, 1], [1, 0, 3, 1]
    plain = evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams)
    # q0: positives at ranks 2 and 4 -> AP (1/2 + 2/4)/2, INP 2/4; q1: rank 1
    assert plain["rank1"] == 0.5 and plain["mAP"] == pytest.approx(0.75) and plain["mINP"] == pytest.approx(0.75)
    sysu = evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams,
                                   protocol=VIProtocol(colocated_cameras=((1, 2),)))
    # q0 now ranks only cameras 0 and 3: its positive is first; q1 is unaffected
    assert sysu["rank1"] == 1.0 and sysu["mAP"] == 1.0 and sysu["mINP"] == 1.0 and sysu["num_valid_queries"] == 2
    assert evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams,
                                   protocol=VIProtocol(colocated_cameras=((2, 1),)))["mAP"] == 1.0  # symmetric
    # a query whose only positive is in the ignored camera is skipped, not counted as a miss
    sysu = VIProtocol(colocated_cameras=((1, 2),))
    with pytest.raises(DataError, match="no query has a positive"):
        evaluate_cross_modality(feats(0.0), feats(0.1, 0.3), [1], [1, 3], [2], [1, 0], protocol=sysu)
    both = evaluate_cross_modality(feats(0.0, 0.3), feats(0.1, 0.3), [1, 3], [1, 3], [2, 5], [1, 0], protocol=sysu)
    assert both["num_valid_queries"] == 1 and both["rank1"] == 1.0


def test_cmc_by_identity():
    # two images of identity 2 come before the positive: image rank 3, identity rank 2
    qf, gf = feats(0.0), feats(0.1, 0.15, 0.2, 0.3)
    args = ([1], [2, 2, 1, 3], [0], [1, 2, 1, 1])
    images = evaluate_cross_modality(qf, gf, *args[:2], *args[2:])
    ids = evaluate_cross_modality(qf, gf, *args[:2], *args[2:], protocol=VIProtocol(cmc_by_identity=True))
    assert list(images["cmc"][:3]) == [0, 0, 1] and list(ids["cmc"][:3]) == [0, 1, 1]
    assert images["mAP"] == ids["mAP"] == pytest.approx(1 / 3) and ids["mINP"] == pytest.approx(1 / 3)
    # same-identity same-camera items are dropped first; ties are broken by gallery index
    same_cam = evaluate_cross_modality(feats(0.0), feats(0.05, 0.1, 0.1), [1], [1, 2, 1], [0], [0, 1, 1],
                                       protocol=VIProtocol(cmc_by_identity=True))
    assert same_cam["rank1"] == 0.0 and same_cam["cmc"][1] == 1.0
    tie_first = evaluate_cross_modality(feats(0.0), feats(0.1, 0.1), [1], [1, 2], [0], [1, 1],
                                        protocol=VIProtocol(cmc_by_identity=True))
    tie_second = evaluate_cross_modality(feats(0.0), feats(0.1, 0.1), [1], [2, 1], [0], [1, 1],
                                         protocol=VIProtocol(cmc_by_identity=True))
    assert tie_first["rank1"] == 1.0 and tie_second["rank1"] == 0.0


def test_identity_cmc_equals_image_cmc_with_one_image_per_identity():
    rng = np.random.default_rng(1)
    qf, gf = rng.normal(size=(20, 4)), rng.normal(size=(15, 4))
    q_pids, g_pids = rng.integers(0, 15, 20), np.arange(15)
    q_cams, g_cams = np.zeros(20, int), np.ones(15, int)
    for metric in ("euclidean", "cosine"):
        a = evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams, metric=metric)
        b = evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams, metric=metric,
                                    protocol=VIProtocol(cmc_by_identity=True))
        assert np.allclose(a["cmc"], b["cmc"])


def test_single_shot_gallery_trials():
    g_pids = np.array([1, 1, 1, 2, 2, 3, 1, 2])
    g_cams = np.array([0, 0, 1, 0, 0, 1, 0, 1])
    draw = single_shot_gallery(g_pids, g_cams, np.random.default_rng(0))
    assert sorted(zip(g_pids[draw], g_cams[draw])) == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 1)]
    assert np.array_equal(draw, single_shot_gallery(g_pids, g_cams, np.random.default_rng(0)))
    picked = {int(i) for s in range(50) for i in single_shot_gallery(g_pids, g_cams, np.random.default_rng(s))}
    assert picked == set(range(8))  # every image of a group can be drawn

    rng = np.random.default_rng(2)
    qf, gf = rng.normal(size=(6, 4)), rng.normal(size=(8, 4))
    q_pids, q_cams = np.array([1, 2, 3, 1, 2, 3]), np.full(6, 5)
    res = evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams, protocol=VIProtocol(gallery_trials=4),
                                  seed=7)
    per_trial = []
    for t in range(4):
        keep = single_shot_gallery(g_pids, g_cams, np.random.default_rng([7, t]))
        per_trial.append(evaluate(qf, gf[keep], q_pids, g_pids[keep], q_cams, g_cams[keep]))
    for k in ("rank1", "mAP", "mINP"):
        assert res[k] == pytest.approx(np.mean([r[k] for r in per_trial]))
        assert res["std"][k] == pytest.approx(np.std([r[k] for r in per_trial]))
    assert res["trials"] == 4
    with pytest.raises(ConfigError, match="gallery_trials"):
        evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams, protocol=VIProtocol(gallery_trials=0))


# --------------------------------------------------------------------------- models, images and video


class MeanColour(nn.Module):
    """A deterministic 'model': the mean of each channel in the top and bottom halves (6-d features)."""

    def forward(self, x):
        return nn.functional.adaptive_avg_pool2d(x, (2, 1)).flatten(1)


@pytest.fixture(scope="module")
def small_vi(tmp_path_factory):
    root = generate_synthetic_vi(tmp_path_factory.mktemp("vi") / "d", SMALL)
    return resolve_datasets([str(root)])["viA"]


@pytest.fixture(scope="module")
def small_video(tmp_path_factory):
    cfg = replace(SMALL, video=True, frames_per_tracklet=4, shots_per_id_per_cam=1)
    root = generate_synthetic_vi(tmp_path_factory.mktemp("vid") / "d", cfg)
    return resolve_datasets([str(root)])["vidA"]


def test_evaluate_model_dispatches_vi_test_sets(small_vi):
    ts = as_test_set("viA", small_vi)
    polluted = replace(ts, query=ts.query + ts.gallery[:3])  # visible samples on the query side are ignored
    vi = evaluate_model(MeanColour(), polluted, height=32, width=16)
    plain = evaluate_model(MeanColour(), TestSet("viA", ts.query, ts.gallery), height=32, width=16)
    assert vi == plain and vi["num_valid_queries"] <= len(ts.query)
    unrestricted = evaluate_model(MeanColour(), TestSet("viA", polluted.query, polluted.gallery), height=32, width=16)
    assert unrestricted["num_valid_queries"] > vi["num_valid_queries"]  # the pollution would count without modes
    direct = evaluate_model(MeanColour(), ts, height=32, width=16)
    assert direct["rank1"] == vi["rank1"] and direct["rank20"] >= direct["rank10"] >= direct["rank1"]
    reverse = evaluate_model(MeanColour(), ts, height=32, width=16, mode=VISIBLE_TO_IR)
    assert 0 < reverse["num_valid_queries"] <= len(ts.gallery)


def test_video_features_are_the_temporal_mean(small_video):
    ts = as_test_set("vidA", small_video)
    res = evaluate_model(MeanColour(), ts, height=32, width=16, seq_len=4, batch_size=8)
    transform = build_transforms(32, 16, train=False)

    def tracklet_features(samples):
        out = []
        for key, _, _ in samples:
            frames = torch.stack([transform(read_image(f)) for f in ts.tracklets[key]])
            out.append(MeanColour()(frames).mean(0))  # Eq. 9 by hand
        return torch.stack(out), [p for _, p, _ in samples], [c for _, _, c in samples]

    qf, qp, qc = tracklet_features(ts.query)
    gf, gp, gc = tracklet_features(ts.gallery)
    expected = evaluate_cross_modality(qf, gf, qp, gp, qc, gc)
    assert {k: res[k] for k in result_keys()} == pytest.approx({k: expected[k] for k in result_keys()}, abs=1e-6)


def test_video_evaluation_averages_the_test_sets_own_t(small_video):
    """T defaults to the test set's protocol (L2RW+: 6 for HITSZ-VCM, 10 for BUPTCampus); --seq-len overrides it."""
    ts = as_test_set("vidA", small_video)
    assert ts.vi_protocol.seq_len == 6  # vi-folders
    two = replace(ts, vi_protocol=replace(ts.vi_protocol, seq_len=2))
    size = dict(height=32, width=16)
    by_protocol, _, _ = sample_features(MeanColour(), two, two.query, **size)
    explicit, _, _ = sample_features(MeanColour(), ts, ts.query, seq_len=2, **size)
    every_frame, _, _ = sample_features(MeanColour(), ts, ts.query, seq_len=4, **size)
    assert torch.equal(by_protocol, explicit) and not torch.allclose(by_protocol, every_frame)
    transform = build_transforms(32, 16, train=False)
    key = ts.query[0][0]
    frames = [transform(read_image(ts.tracklets[key][i])) for i in frame_indices(len(ts.tracklets[key]), 2)]
    assert torch.allclose(by_protocol[0], MeanColour()(torch.stack(frames)).mean(0), atol=1e-6)


def test_temporal_mean_and_wrapper():
    x = torch.arange(24.0).reshape(2, 3, 4)
    assert torch.equal(temporal_mean(x), x.mean(1))
    assert torch.equal(temporal_mean(x.reshape(6, 4), seq_len=3), x.mean(1))
    assert torch.equal(temporal_mean(x, seq_len=3), x.mean(1))
    with pytest.raises(ConfigError, match="do not split"):
        temporal_mean(x.reshape(6, 4), seq_len=4)
    with pytest.raises(ConfigError, match=r"\(B, T, D\)"):
        temporal_mean(x.reshape(6, 4))
    torch.manual_seed(0)
    frame_model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 2, 5))
    clips = torch.randn(2, 3, 3, 4, 2)
    wrapped = TemporalMean(frame_model)(clips)
    by_hand = torch.stack([frame_model(clip).mean(0) for clip in clips])
    assert torch.allclose(wrapped, by_hand, atol=1e-6)
    with pytest.raises(ConfigError, match="clips"):
        TemporalMean(frame_model)(clips[0])


def test_frame_sampling_and_sequence_dataset(small_video):
    assert frame_indices(10, 4) == [0, 2, 5, 7]
    assert frame_indices(3, 5) == [0, 0, 1, 1, 2]  # short tracklets repeat frames
    torch.manual_seed(0)
    for _ in range(20):
        idx = frame_indices(10, 4, "random")
        assert all(lo <= i < hi for i, lo, hi in zip(idx, [0, 2, 5, 7], [2, 5, 7, 10]))
    assert frame_indices(2, 3, "random") == [0, 0, 1]
    with pytest.raises(ConfigError):
        frame_indices(5, 0)
    with pytest.raises(ConfigError, match="sampling"):
        frame_indices(5, 2, "all")
    transform = build_transforms(32, 16, train=False)
    ds = SequenceDataset(small_video.query, small_video.tracklets, transform, seq_len=2)
    clip, pid, cam = ds[0]
    key = small_video.query[0][0]
    assert clip.shape == (2, 3, 32, 16) and (pid, cam) == small_video.query[0][1:]
    frames = small_video.tracklets[key]
    assert torch.equal(clip[1], transform(read_image(frames[2])))
    with pytest.raises(DataError, match="no tracklet frames"):
        SequenceDataset([("nowhere", 1, 0)], small_video.tracklets, transform, seq_len=2)
