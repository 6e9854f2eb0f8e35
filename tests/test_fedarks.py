"""FedARKS (paper 001): Eq. 1 fusion, KS weights (Eq. 3-7), local part branch, end-to-end run."""

import math

import pytest
import torch

from privreid.checkpoint import load_checkpoint, load_model
from privreid.data.catalog import build_federation
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.federated.methods.fedarks import (
    HAS_RATIO, RATIO, SMOOTHED, UPDATE_NORM, KnowledgeSelection, direction_ratio, ks_weights, smooth_ratio)
from privreid.federated.method_options import option_defaults
from privreid.federated.registry import get_method
from privreid.federated.strategy import Upload
from privreid.models import build_model
from privreid.models.part_branch import PART_BANDS, band_rows, fuse

from conftest import spy_on_uploads, tiny_config
from privreid.composition import build_run


# --------------------------------------------------------------------------- RK
def test_eq1_fusion_on_a_toy_tensor():
    g = torch.tensor([[2.0, 0.0, -4.0]])
    p = torch.tensor([[0.0, 6.0, 4.0]])
    assert torch.equal(fuse(g, p, 0.5), torch.tensor([[1.0, 3.0, 0.0]]))
    assert torch.allclose(fuse(g, p, torch.tensor(0.25)), torch.tensor([[0.5, 4.5, 2.0]]))
    assert torch.equal(fuse(g, p, 1.0), g)


def test_band_rows_cover_head_torso_legs():
    assert PART_BANDS == ((0.0, 0.25), (0.25, 0.55), (0.55, 1.0))
    assert band_rows(16) == [(0, 4), (4, 9), (9, 16)]  # 256x128 input, last stride 1
    assert band_rows(8) == [(0, 2), (2, 4), (4, 8)]
    assert band_rows(2) == [(0, 1), (1, 2), (1, 2)]  # tiny maps: every band keeps a row


def test_part_model_retrieves_with_fused_theta_and_rebuilds():
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=3, feat_dim=8, transforms=["part_branch"]).eval()
    assert model.model_config()["transforms"] == [{"name": "part_branch"}]
    x = torch.randn(2, 3, 64, 32)
    with torch.no_grad():
        fmap = model.backbone.feature_map(x)
        g = model.neck(torch.flatten(model.backbone.avgpool(fmap), 1))
        p = model.part(fmap)
        assert torch.allclose(model(x), 0.5 * g + 0.5 * p, atol=1e-6)
        pre, feat, logits = model.forward_train(x)
        assert torch.allclose(pre, feat) and torch.allclose(feat, model(x), atol=1e-6)
        model.part.fusion_weight.fill_(1.0)
        assert torch.allclose(model(x), g, atol=1e-6)  # global branch only
    rebuilt = build_model(**model.model_config())
    rebuilt.load_state_dict(model.state_dict())


# --------------------------------------------------------------------------- KS
def test_direction_ratio_is_eq3_with_the_epsilon_gate():
    keys = ["w"]
    prev, now = {"w": torch.tensor([0.0, 0.0])}, {"w": torch.tensor([3.0, 4.0])}  # ||global step|| = 5
    after = {"w": torch.tensor([3.0, 6.0])}  # ||local update|| = 2
    r, n = direction_ratio(now, prev, after, keys)
    assert n == pytest.approx(2.0) and r == pytest.approx(2.5)
    assert direction_ratio(now, None, after, keys) == (None, pytest.approx(2.0))  # first participation
    tiny = {"w": now["w"] + 1e-10}
    r, n = direction_ratio(now, prev, tiny, keys)
    assert r is None and n < 1e-8  # gated


def test_ks_weights_match_hand_computation_with_smoothing_and_gate():
    beta, gamma, eps = 5.0, 0.7, 1e-8
    # round t: raw ratios and the smoothed history of three clients
    raw = [1.2, 0.5, 3.0]
    prev = [1.0, 0.9, None]
    smoothed = [smooth_ratio(r, p, gamma) for r, p in zip(raw, prev)]
    assert smoothed == pytest.approx([0.7 * 1.2 + 0.3 * 1.0, 0.7 * 0.5 + 0.3 * 0.9, 3.0])  # [1.14, 0.62, 3.0]
    e = [math.exp(-5 * 0.14), math.exp(-5 * 0.38), math.exp(-5 * 2.0)]
    expected = [x / sum(e) for x in e]
    assert ks_weights(smoothed, [1.0, 1.0, 1.0], beta, eps) == pytest.approx(expected)
    # the epsilon gate: client 2's update is below epsilon -> weight 0, others renormalised
    gated = ks_weights(smoothed, [1.0, 1e-9, 1.0], beta, eps)
    assert gated == pytest.approx([e[0] / (e[0] + e[2]), 0.0, e[2] / (e[0] + e[2])])
    # a client without a ratio yet gets the mean raw weight of the others
    assert ks_weights([1.14, None], [1.0, 1.0], beta, eps) == pytest.approx([0.5, 0.5])
    assert ks_weights([None, None], [1.0, 1.0]) == [0.5, 0.5]
    assert ks_weights([1.0, 1.0], [0.0, 0.0]) == [0.0, 0.0]


def test_knowledge_selection_aggregates_with_ks_weights():
    def up(name, value, ratio, norm, has=1.0):
        return Upload(name, {"w": torch.tensor([value]), "n": torch.tensor(7 if name == "a" else 9)}, 10,
                      {RATIO: ratio, HAS_RATIO: has, UPDATE_NORM: norm})

    ups = [up("a", 0.0, 1.0, 1.0), up("b", 10.0, 1.2, 1.0)]
    wa, wb = 1.0, math.exp(-1.0)
    out = KnowledgeSelection(5.0, 1e-8).aggregate({"w": torch.tensor([5.0]), "n": torch.tensor(0)}, ups).global_state
    assert out["w"].item() == pytest.approx(10.0 * wb / (wa + wb), rel=1e-6)
    assert out["n"].item() == 7  # integer buffer from the heaviest client
    # every client gated: the global state is kept
    still = [up("a", 0.0, 1.0, 0.0), up("b", 10.0, 1.0, 1e-12)]
    assert KnowledgeSelection().aggregate({"w": torch.tensor([5.0])}, still).global_state["w"].item() == 5.0
    with pytest.raises(ValueError, match="ks_update_norm"):
        KnowledgeSelection().aggregate({}, [Upload("a", {"w": torch.tensor([1.0])}, 1, {})])


def test_options_are_validated(tiny_synth):
    method = get_method("fedarks")
    assert option_defaults(method.options) == {"v": 0.5, "beta": 5.0, "gamma": 0.7, "epsilon": 1e-8}
    with pytest.raises(ConfigError, match="v must lie"):
        method.make_client_update(tiny_config(tiny_synth, method="fedarks", method_options={"v": 2}))


# --------------------------------------------------------------------------- end to end
def test_fedarks_end_to_end_part_branch_stays_local(tiny_synth, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_synth, method="fedarks", rounds=2, triplet_weight=1.0, instances_per_id=2)
    seen = spy_on_uploads(monkeypatch, KnowledgeSelection)
    fed = build_federation(cfg.data.roots, test_domains=cfg.data.test_domains)
    engine = FederatedEngine(cfg, fed, tmp_path, progress=False, build=build_run)
    summary = engine.run()

    assert len(seen) == 2 and all(len(u) == 2 for u in seen)
    part_keys = {k for k in engine.model.state_dict() if k.startswith("part.")}
    assert part_keys >= {"part.fc.weight", "part.bn.running_mean", "part.fusion_weight"}
    for uploads in seen:
        for u in uploads:
            assert not any(k.startswith(("part.", "classifier.")) for k in u.state)
            assert "neck.fc.weight" in u.state
            assert all(isinstance(v, float) for v in u.metrics.values())
            assert u.metrics[UPDATE_NORM] > 0 and u.metrics["triplet_on"] == 1.0
    assert all(u.metrics[HAS_RATIO] == 0.0 for u in seen[0])  # no previous global in round 1
    assert all(u.metrics[HAS_RATIO] == 1.0 and u.metrics[RATIO] > 0 for u in seen[1])
    assert "global_unseen" in summary and "local_seen" in summary

    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt["model_config"]["transforms"] == [{"name": "part_branch"}]
    assert not any(k.startswith("part.") for k in ckpt["global_state"])
    for name, state in ckpt["client_states"].items():
        assert set(k for k in state if k.startswith("part.")) == part_keys
        assert state["part.fusion_weight"].item() == 0.5
        mem = ckpt["client_memory"][name]
        assert SMOOTHED in mem and any(k.startswith("ks/prev_global/") for k in mem)
    assert ckpt["global_eval_extra"]["part.fusion_weight"].item() == 1.0

    x = torch.randn(2, 3, 32, 16)
    glob = load_model(tmp_path / "ckpt.pt")
    client = load_model(tmp_path / "ckpt.pt", client="synthA")
    with torch.no_grad():
        # the global model retrieves with the global branch only ...
        fmap = glob.backbone.feature_map(x)
        assert torch.allclose(glob(x), glob.neck(torch.flatten(glob.backbone.avgpool(fmap), 1)), atol=1e-6)
        # ... a client's personalised model with the fused theta of its own part branch
        fmap = client.backbone.feature_map(x)
        g = client.neck(torch.flatten(client.backbone.avgpool(fmap), 1))
        assert torch.allclose(client(x), 0.5 * g + 0.5 * client.part(fmap), atol=1e-5)
    assert torch.equal(client.part.fc.weight, ckpt["client_states"]["synthA"]["part.fc.weight"])


def test_resume_keeps_the_ks_history(tiny_synth, tmp_path):
    """KS's cross-round state (previous global, smoothed R) lives in the checkpointed client memory."""
    cfg3 = tiny_config(tiny_synth, method="fedarks", rounds=3)
    cfg2 = tiny_config(tiny_synth, method="fedarks", rounds=2)
    fed = build_federation(cfg3.data.roots, test_domains=cfg3.data.test_domains)
    FederatedEngine(cfg3, fed, tmp_path / "full", progress=False, build=build_run).run()
    FederatedEngine(cfg2, fed, tmp_path / "cut", progress=False, build=build_run).run()
    FederatedEngine(cfg3, fed, tmp_path / "cut", progress=False, build=build_run).run(resume=True)
    a, b = load_checkpoint(tmp_path / "full" / "ckpt.pt"), load_checkpoint(tmp_path / "cut" / "ckpt.pt")
    assert all(torch.equal(a["global_state"][k], b["global_state"][k]) for k in a["global_state"])
    ratios = [[m[RATIO] for m in c["metrics"] if m["scope"] == "train" and m["round"] == 3] for c in (a, b)]
    assert ratios[0] == ratios[1] and len(ratios[0]) == 2
    assert all(torch.equal(a["client_memory"][n][SMOOTHED], b["client_memory"][n][SMOOTHED])
               for n in a["client_memory"])
