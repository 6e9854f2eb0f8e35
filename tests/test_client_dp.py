"""Client-level DP (DP-FedAvg): clipping, noise scale, uniform weights, refusals, accounting, budget stop."""

import json

import pytest
import torch

from privreid.checkpoint import load_checkpoint, load_model
from privreid.data import ImageDataset, build_transforms
from privreid.data.catalog import federation_for_config
from privreid.defenses import apply_defenses
from privreid.defenses.accounting import epsilon
from privreid.defenses.client_dp.mechanism import (
    ClientLevelDP,
    clip_update,
    trainable_parameter_names,
    update_norm,
    with_client_dp,
)
from privreid.errors import ConfigError
from privreid.evaluation.model_eval import dataset_features
from privreid.federated.engine import FederatedEngine
from privreid.federated.registry import get_method
from privreid.federated.strategy import Upload

from conftest import tiny_config
from privreid.composition import build_run


def test_clipping_bounds_the_joint_update_norm_and_keeps_its_direction():
    torch.manual_seed(0)
    update = {"a": torch.randn(300) * 3, "b": torch.randn(5, 7), "n": torch.tensor(4)}
    norm = update_norm(update)
    assert norm == pytest.approx(float(torch.cat([update["a"], update["b"].reshape(-1)]).norm()), rel=1e-6)
    clipped = clip_update(update, 2.0)
    assert update_norm(clipped) == pytest.approx(2.0, rel=1e-6)
    assert torch.allclose(clipped["a"], update["a"] * (2.0 / norm)) and clipped["n"] is update["n"]
    small = clip_update(update, 10 * norm)  # below the bound: unchanged
    assert all(torch.equal(small[k], update[k]) for k in update)


def test_noise_variance_is_z_s_over_m_squared():
    g = {"w": torch.zeros(200_000), "steps": torch.tensor(3)}
    uploads = [Upload(f"c{i}", {k: v.clone() for k, v in g.items()}, 10) for i in range(4)]  # no update at all
    torch.manual_seed(0)
    out = ClientLevelDP(clip=0.5, noise_multiplier=1.2, trainable={"w"}).aggregate(g, uploads).global_state
    noise = out["w"].double()
    assert abs(noise.mean().item()) < 0.01 * 0.15
    assert noise.var().item() == pytest.approx((1.2 * 0.5 / 4) ** 2, rel=0.02)  # (Z S / m)^2
    assert out["steps"].item() == 3  # integer buffers keep the server's value


def test_aggregate_is_global_plus_uniform_mean_of_clipped_parameter_updates_plus_noise():
    g = {"w": torch.zeros(1000), "bn.weight": torch.ones(50), "bn.running_mean": torch.zeros(50),
         "bn.running_var": torch.full((50,), 0.01), "bn.num_batches_tracked": torch.tensor(7)}
    trainable = {"w", "bn.weight"}
    torch.manual_seed(1)
    updates = [{"w": torch.randn(1000) * s, "bn.weight": torch.randn(50) * s} for s in (0.001, 5.0)]
    uploads = [Upload(name, {**{k: g[k] + u[k] for k in trainable},  # data volume n is ignored
                             "bn.running_mean": torch.randn(50) * 30, "bn.running_var": torch.rand(50) * 900,
                             "bn.num_batches_tracked": torch.tensor(9)}, n)
               for name, u, n in (("small", updates[0], 1), ("big", updates[1], 1000))]
    strategy = ClientLevelDP(clip=1.0, noise_multiplier=0.5, trainable=trainable)
    torch.manual_seed(7)
    out = strategy.aggregate(g, uploads).global_state
    # the clipping norm runs over the trainable parameters only: the huge statistics do not shrink them
    clipped = [clip_update({k: v.double() for k, v in u.items()}, 1.0) for u in updates]
    assert torch.equal(clipped[0]["w"], updates[0]["w"].double())  # the small update is below the bound
    torch.manual_seed(7)
    for k in ("w", "bn.weight"):  # noise drawn key by key in the global state's order
        expected = (g[k].double() + (clipped[0][k] + clipped[1][k]) / 2
                    + torch.randn(g[k].shape, dtype=torch.float64) * strategy.noise_std(2)).float()
        assert torch.allclose(out[k], expected, atol=1e-6)
    for k in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):  # never read from the uploads
        assert torch.equal(out[k], g[k]) and out[k] is not g[k]
    with pytest.raises(ValueError, match="not a floating tensor"):
        ClientLevelDP(1.0, 0.5, trainable={"bn.num_batches_tracked"}).aggregate(g, uploads)


def test_trainable_parameter_names_are_the_models_trainable_parameters():
    cfg = tiny_config("unused", "fedpav", client_dp=True, clip=1.0, noise_multiplier=1.0)
    names = trainable_parameter_names(get_method("fedpav"), cfg)
    assert {"backbone.conv1.weight", "backbone.bn1.weight", "backbone.bn1.bias", "neck.fc.weight",
            "neck.bn.weight"} <= names
    assert not any(k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in names)
    cfg.model.neck = "bnneck"  # BNNeck's bias is frozen at zero: not trainable, never noised
    names = trainable_parameter_names(get_method("fedpav"), cfg)
    assert "neck.bn.weight" in names and "neck.bn.bias" not in names
    # the method's model overrides count (SKA's attentive norms) and drawing the names leaves the RNG alone
    torch.manual_seed(3)
    before = torch.get_rng_state()
    ska = trainable_parameter_names(get_method("ska"), cfg)
    assert torch.equal(torch.get_rng_state(), before)
    assert "backbone.layer1.0.bn2.mix_weight" in ska and "backbone.layer1.0.bn2.mix_weight" not in names
    strategy = with_client_dp(get_method("fedpav")).strategy(cfg)
    assert strategy.trainable == trainable_parameter_names(get_method("fedpav"), cfg)


def test_only_plain_averages_can_be_replaced():
    cfg = tiny_config("unused", "fedpav", client_dp=True, clip=1.0, noise_multiplier=1.0)
    assert isinstance(with_client_dp(get_method("fedpav")).strategy(cfg), ClientLevelDP)  # data volume
    cfg = tiny_config("unused", "fedreid", client_dp=True, clip=1.0, noise_multiplier=1.0)
    assert isinstance(with_client_dp(get_method("fedreid")).strategy(cfg), ClientLevelDP)  # uniform
    for name in ("fedpav-cdw", "fedarks"):
        cfg = tiny_config("unused", name, client_dp=True, clip=1.0, noise_multiplier=1.0)
        with pytest.raises(ConfigError, match="no client-level guarantee"):
            with_client_dp(get_method(name)).strategy(cfg)
    for name in ("standalone", "centralized"):
        with pytest.raises(ConfigError, match="federated method"):
            with_client_dp(get_method(name))
    # beta noise goes on top of the DP aggregate
    cfg = tiny_config("unused", "fedpav", client_dp=True, clip=1.0, noise_multiplier=1.0, beta=0.1)
    assert isinstance(apply_defenses(get_method("fedpav"), cfg).strategy(cfg).inner, ClientLevelDP)


@pytest.mark.parametrize("train,match", [
    (dict(client_dp=True, noise_multiplier=1.0), "needs --clip"),
    (dict(client_dp=True, clip=1.0), "needs --noise-multiplier"),
    (dict(client_dp=True, clip=-1.0, noise_multiplier=1.0), "clip must be > 0"),
    (dict(client_dp=True, clip=1.0, noise_multiplier=1.0, max_grad_norm=1.0), "--max-grad-norm clips per-sample"),
    (dict(clip=1.0), "given without"),
])
def test_invalid_client_dp_settings(train, match):
    with pytest.raises(ConfigError, match=match):
        tiny_config("unused", **train).validate()


def records(out):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["scope"] == "privacy"]


def test_client_dp_trains_and_reports_epsilon_per_round(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=2, client_dp=True, clip=1e-3, noise_multiplier=1.0, delta=1e-2,
                      client_fraction=0.5, max_steps_per_epoch=1)
    logs = []
    summary = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=logs.append, build=build_run).run()
    q = 1 / 2  # one of the two training clients a round
    assert [(r["round"], r["epsilon"]) for r in records(tmp_path)] == [
        (1, pytest.approx(epsilon(q, 1.0, 1, 1e-2))), (2, pytest.approx(epsilon(q, 1.0, 2, 1e-2)))]
    privacy = summary["privacy"]
    assert privacy["level"] == "client" and privacy["sample_rate"] == q and privacy["clip"] == 1e-3
    assert privacy["epsilon"] == pytest.approx(epsilon(q, 1.0, 2, 1e-2))
    assert "trusted aggregator" in privacy["guarantee"] and any("uniform weights" in n for n in privacy["notes"])
    assert any("BatchNorm running statistics" in n for n in privacy["notes"])
    assert any("Z*S/m = 0.001" in line for line in logs)
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert all(torch.isfinite(v).all() for v in ckpt["global_state"].values() if v.is_floating_point())


def test_budget_stops_training_with_a_valid_checkpoint(tiny_synth, tmp_path):
    one, two = epsilon(1.0, 2.0, 1, 1e-2), epsilon(1.0, 2.0, 2, 1e-2)
    cfg = tiny_config(tiny_synth, rounds=4, client_dp=True, clip=1e-3, noise_multiplier=2.0, delta=1e-2,
                      target_epsilon=(one + two) / 2, max_steps_per_epoch=1)
    summary = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None, build=build_run).run()
    assert "privacy budget" in summary["privacy"]["stopped"] and "round 2" in summary["privacy"]["stopped"]
    assert load_checkpoint(tmp_path / "ckpt.pt")["round"] == 1
    assert summary["privacy"]["epsilon"] == pytest.approx(one) and summary["evaluated_round"] == 1
    load_model(tmp_path / "ckpt.pt")


@pytest.mark.parametrize("train,match", [
    (dict(delta=0.5), "below 1/N"),  # two clients
    (dict(target_epsilon=0.1), "exceeded by the first round"),
    (dict(method="fedpav-cdw"), "no client-level guarantee"),
])
def test_settings_checked_before_training(tiny_synth, tmp_path, train, match):
    cfg = tiny_config(tiny_synth, **{"client_dp": True, "clip": 1.0, "noise_multiplier": 1.0, **train})
    with pytest.raises(ConfigError, match=match):
        FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None, build=build_run)


def test_statement_never_claims_epsilon_for_beta_noise(tiny_synth):
    from privreid.defenses import PrivacyLedger

    clients = federation_for_config(tiny_config(tiny_synth)).clients
    beta_only = PrivacyLedger(tiny_config(tiny_synth, beta=0.01), clients, 2).summary([])
    assert beta_only["epsilon"] is None and "no formal" in beta_only["guarantee"]
    assert beta_only["beta"] == {"mode": "upload", "scale": 0.01}
    cfg = tiny_config(tiny_synth, client_dp=True, clip=1.0, noise_multiplier=1.0, beta=0.01)
    both = PrivacyLedger(cfg, clients, 2).summary([{"round": 3, "scope": "privacy", "epsilon": 2.5}])
    assert both["epsilon"] == 2.5 and both["level"] == "client"  # the DP mechanism's epsilon, nothing for beta
    assert any("beta white noise is added on top" in n for n in both["notes"])
    assert PrivacyLedger(tiny_config(tiny_synth), clients, 2).summary([]) == {
        "notes": [], "stopped": None, "defense": None, "epsilon": None, "guarantee": "none",
        "secure_aggregation": None,
        "server_view": "every selected client's upload (shared keys, sample count, metrics) in the clear"}


def test_global_model_stays_finite_under_strong_client_noise(tiny_synth, tmp_path):
    """Regression: at Z S / m = 0.25 noised BatchNorm variances hit 0 and the round-2 features overflowed to NaN."""
    cfg = tiny_config(tiny_synth, "fedpav", rounds=2, client_dp=True, clip=1.0, noise_multiplier=0.5)
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None, build=build_run)
    engine.run()  # evaluates the global model after each round
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt["round"] == 2
    stats = [k for k in ckpt["global_state"] if k.endswith(("running_mean", "running_var"))]
    assert stats and all(torch.equal(ckpt["global_state"][k], engine.init_state[k]) for k in stats)
    conv = "backbone.conv1.weight"  # noised: moved by about 0.25 * sqrt(2 rounds) per entry
    assert (ckpt["global_state"][conv] - engine.init_state[conv]).std() == pytest.approx(0.25 * 2 ** 0.5, rel=0.1)
    unseen = engine.federation.unseen[0]
    feats, _, _ = dataset_features(load_model(tmp_path / "ckpt.pt"),
                                   ImageDataset(unseen.query, build_transforms(32, 16, train=False)))
    assert len(feats) == len(unseen.query) and torch.isfinite(feats).all()
