"""LiRA (shadow models, cached and resumable), the server view (replayed uploads), and the one-run DP audit."""

from __future__ import annotations

import numpy as np
import pytest

import privreid.defenses.client_dp.mechanism as client_dp
from privreid.auditing import AuditSettings, run_audit
from privreid.auditing.dp_audit import DPAuditSettings, audit_scores, epsilon_lower_bound, p_value, run_dp_audit
from privreid.auditing.lira import balanced_masks, lira_scores
from privreid.training import train_run

from conftest import tiny_config


def test_lira_gaussian_test_against_hand_values():
    # 4 shadows, 2 candidates; candidate 0 is IN for shadows 0,1
    masks = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=bool)
    shadows = np.array([[2.0, 0.0], [4.0, 2.0], [0.0, 3.0], [2.0, 5.0]])
    target = np.array([3.0, 1.0])
    online = lira_scores(target, shadows, masks, online=True, fix_variance=False)
    # candidate 0: IN N(3, 2), OUT N(1, 2) (sample std sqrt(2)); log-ratio at 3 = (0 - (-(2^2)/(2*2))) = 1
    assert online[0] == pytest.approx(1.0)
    offline = lira_scores(target, shadows, masks, online=False, fix_variance=False)
    assert offline[1] == pytest.approx(0.5)  # OUT mean of candidate 1 is 1.0 = its target
    m = balanced_masks(8, 50, seed=0)
    assert (m.sum(axis=0) == 4).all() and not (m == balanced_masks(8, 50, seed=1)).all()


def test_lira_trains_caches_and_resumes_shadows(tiny_synth, tmp_path, monkeypatch):
    train_run(tiny_config(tiny_synth, "fedpav", rounds=1), tmp_path / "run", progress=False)
    settings = AuditSettings(levels=["image"], attacks=["lira"], shadows=2, bootstrap=0)
    res = run_audit([tmp_path / "run" / "ckpt.pt"], tmp_path / "audit", settings, device="cpu")
    assert [r["attack"] for r in res["records"]] == ["lira-online", "lira-offline"]
    from privreid.experiments.sweep import LeakageSettings, membership_leakage

    leak = membership_leakage(tmp_path / "run" / "ckpt.pt", LeakageSettings(), "cpu")  # the sweep's MIA columns
    assert set(leak) == {"MIA TPR@1% image", "MIA TPR@1% identity"} and all(0 <= v <= 1 for v in leak.values())
    shadow_root = next((tmp_path / "audit" / "cache" / "shadows").iterdir())
    assert sorted(p.name for p in shadow_root.iterdir()) == ["masks.npy", "shadow_0", "shadow_1"]
    # a second audit reuses the shadows: no training at all
    import privreid.federated.engine as engine

    def no_training(*a, **k):
        raise AssertionError("cached shadows must be reused")

    monkeypatch.setattr(engine.FederatedEngine, "run", no_training)
    again = run_audit([tmp_path / "run" / "ckpt.pt"], tmp_path / "audit", settings, device="cpu")
    assert [r["auc"] for r in again["records"]] == [r["auc"] for r in res["records"]]


def test_server_view_replays_and_verifies_uploads(tiny_synth, tmp_path):
    train_run(tiny_config(tiny_synth, "fedpav", rounds=2), tmp_path / "run", progress=False)
    settings = AuditSettings(levels=["image"], views=["server"], client="synthB", bootstrap=0)
    res = run_audit([tmp_path / "run" / "ckpt.pt"], tmp_path / "a", settings, device="cpu")
    rec = res["records"][0]
    assert rec["settings"]["replay_verified"] is True and rec["settings"]["rounds"] == [1, 2]
    assert rec["settings"]["scope"] == "synthB"
    one = run_audit([tmp_path / "run" / "ckpt.pt"], tmp_path / "a",
                    AuditSettings(levels=["image"], views=["server"], client="synthB", round=1, bootstrap=0),
                    device="cpu")["records"][0]
    assert one["settings"]["rounds"] == [1] and one["auc"] != rec["auc"]


def test_server_aggregate_view_attacks_the_weighted_sum_of_the_rounds_uploads(tiny_synth, tmp_path):
    import torch

    from privreid.auditing.views import replay
    from privreid.checkpoint import Checkpoint
    from privreid.data.catalog import federation_for_config

    cfg = tiny_config(tiny_synth, "fedpav", rounds=1)
    train_run(cfg, tmp_path / "run", progress=False)
    ckpt_path = tmp_path / "run" / "ckpt.pt"
    settings = AuditSettings(levels=["image"], attacks=["loss"], views=["server", "server-aggregate"], client="synthB",
                             bootstrap=0)
    res = run_audit([ckpt_path], tmp_path / "a", settings, device="cpu")
    single, agg = res["records"]
    assert (single["view"], agg["view"]) == ("server", "server-aggregate")
    assert agg["settings"]["aggregated_clients"] == {"1": ["synthA", "synthB"]} and agg["settings"]["rounds"] == [1]
    assert agg["settings"]["replay_verified"] is True and agg["settings"]["scope"] == "synthB"
    assert "server-aggregate" in (tmp_path / "a" / "report.md").read_text()
    # the attack input is the sum of the individually replayed uploads, weighted as FedPav averages (n_k)
    ckpt = Checkpoint.load(ckpt_path)
    sums, verified = replay(ckpt, "synthB", tmp_path / "a" / "cache", aggregate=True)
    uploads = {c: replay(ckpt, c, tmp_path / "a" / "cache")[0][1] for c in ("synthA", "synthB")}
    sizes = {c.name: len(c.train) for c in federation_for_config(cfg).clients}
    assert verified and sums[1].weight == sizes["synthA"] + sizes["synthB"]
    floating = [k for k, v in uploads["synthA"].items() if v.is_floating_point()]
    assert sorted(sums[1].sum) == sorted(floating)
    for k in floating:
        plain = uploads["synthA"][k].double() * sizes["synthA"] + uploads["synthB"][k].double() * sizes["synthB"]
        assert torch.equal(sums[1].sum[k], plain), k
        # ... whose mean is FedPav's aggregate: the released global model after its one round
        if k in ckpt.global_state:
            torch.testing.assert_close(sums[1].mean()[k].float(), ckpt.global_state[k].float(), rtol=0, atol=1e-6)
    assert not torch.equal(sums[1].mean()["neck.fc.weight"].float(), uploads["synthB"]["neck.fc.weight"])


def test_server_aggregate_view_refuses_servers_that_read_each_upload(tiny_synth, tmp_path):
    from privreid.auditing.views import mean_weight
    from privreid.errors import ConfigError
    from privreid.federated.strategy import Upload

    upload = Upload("a", {}, 7)
    assert mean_weight(tiny_config(tiny_synth, "fedpav"))(upload) == 7
    assert mean_weight(tiny_config(tiny_synth, "fedpav", client_dp=True, clip=1.0, noise_multiplier=1.0))(upload) == 1
    with pytest.raises(ConfigError, match="server-aggregate view needs a server that averages"):
        mean_weight(tiny_config(tiny_synth, "fedpav-cdw"))
    train_run(tiny_config(tiny_synth, "fedpav-cdw", rounds=1, max_steps_per_epoch=1), tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match="server-aggregate view needs a server that averages"):  # before any work
        run_audit([tmp_path / "run" / "ckpt.pt"], tmp_path / "a", AuditSettings(views=["server-aggregate"]))
    assert not (tmp_path / "a").exists()


def test_one_run_bound_matches_the_paper_formula():
    # all r guesses right: p-value at eps is q^r (delta = 0)
    assert p_value(100, 10, 10, 1.0, 0.0) == pytest.approx((1 / (1 + np.exp(-1))) ** 10)
    eps = epsilon_lower_bound(100, 10, 10, 0.0, 0.95)
    q = 0.05 ** (1 / 10)
    assert eps == pytest.approx(np.log(q / (1 - q)), rel=1e-6)
    assert epsilon_lower_bound(100, 10, 5, 0.0, 0.95) == 0.0  # chance accuracy proves nothing
    assert p_value(1000, 10, 10, 1.0, 1e-3) > p_value(1000, 10, 10, 1.0, 0.0)  # delta loosens the bound
    rng = np.random.default_rng(0)
    included = rng.random(200) < 0.5
    null = audit_scores(rng.normal(size=200), included, delta=1e-5, confidence=0.95)
    assert null["epsilon_lower"] < 0.5
    perfect = audit_scores(included.astype(float), included, delta=1e-5, confidence=0.95)
    assert perfect["epsilon_lower"] > 3


def test_dp_audit_catches_broken_clipping(tiny_synth, tmp_path, monkeypatch):
    """Client-level DP: a correct run passes; with clipping broken in a test double the audit reports FAILED."""
    cfg = tiny_config(tiny_synth, "fedpav", rounds=1, client_dp=True, clip=0.01, noise_multiplier=10.0)
    settings = DPAuditSettings(canaries=24)
    ok = run_dp_audit(cfg, tmp_path / "ok", settings)
    assert ok["audit"] == "PASSED" and ok["epsilon_lower"] <= ok["epsilon_accounted"]
    assert ok["level"] == "client" and 0 < ok["epsilon_accounted"] < 1
    monkeypatch.setattr(client_dp, "clip_update", lambda update, bound: update)  # the bug: no clipping
    broken = run_dp_audit(cfg, tmp_path / "broken", settings)
    assert broken["audit"] == "FAILED" and broken["epsilon_lower"] > broken["epsilon_accounted"]
    assert broken["epsilon_accounted"] == pytest.approx(ok["epsilon_accounted"])


@pytest.mark.slow
def test_dp_audit_record_level_dp_sgd_passes(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, "fedpav", rounds=2, dp_sgd=True, noise_multiplier=1.0, max_steps_per_epoch=None)
    rec = run_dp_audit(cfg, tmp_path / "r", DPAuditSettings(canaries=20))
    assert rec["level"] == "record" and rec["audit"] == "PASSED" and rec["audited_client"] == "synthA"
