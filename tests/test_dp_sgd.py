"""Record-level DP-SGD: GroupNorm models, per-sample clipping and noise, accounting, resume, budget, errors."""

import json

import pytest
import torch
from opacus.validators import ModuleValidator
from torch import nn

from privreid.checkpoint import load_checkpoint, load_model
from privreid.data.catalog import federation_for_config
from privreid.defenses.accounting import ClientAccountant, epsilon
from privreid.defenses.dp_sgd.mechanism import HISTORY_KEY, NOISE_KEY, DPSGDPlan, PrivateTraining, plan_for
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.losses import identity_loss
from privreid.models import build_model

from conftest import kill_in_round, tiny_config
from privreid.composition import build_run

BN = nn.modules.batchnorm._BatchNorm


def tiny_gn_model(num_classes=5, transforms=()):
    torch.manual_seed(0)
    return build_model(arch="resnet18", feat_dim=32, num_classes=num_classes, transforms=["group_norm", *transforms])


# --------------------------------------------------------------------------- GroupNorm conversion
def test_group_norm_model_has_no_batchnorm_and_normalises_each_sample_alone():
    model = tiny_gn_model(transforms=["part_branch"])
    bn_model = build_model(arch="resnet18", feat_dim=32, num_classes=5, transforms=["part_branch"])
    assert not any(isinstance(m, BN) for m in model.modules())
    norms = {n: m for n, m in model.named_modules() if isinstance(m, nn.GroupNorm)}
    assert set(norms) == {n for n, m in bn_model.named_modules() if isinstance(m, BN)}  # same layers, same names
    assert (norms["backbone.bn1"].num_groups, norms["backbone.bn1"].num_channels) == (32, 64)
    assert (norms["backbone.layer4.1.bn2"].num_groups, norms["backbone.layer4.1.bn2"].num_channels) == (32, 512)
    assert norms["neck.bn"].num_groups == 1 and norms["part.bn"].num_groups == 1  # embeddings: LayerNorm-like
    assert set(model.state_dict()) == {k for k in bn_model.state_dict()
                                       if k.rpartition(".")[2] not in ("running_mean", "running_var",
                                                                       "num_batches_tracked")}
    assert ModuleValidator.validate(model, strict=False) == []
    assert ModuleValidator.validate(bn_model, strict=False)  # the BatchNorm model is rejected by Opacus
    x = torch.randn(4, 3, 32, 16)
    for m, independent in ((model, True), (bn_model, False)):  # a sample's output must not depend on the batch
        m.train()
        assert torch.allclose(m.forward_train(x)[1][:2], m.forward_train(x[:2])[1], atol=1e-5) == independent
    alone = torch.cat([model.forward_train(x[i:i + 1])[1] for i in range(4)])
    assert torch.allclose(model.forward_train(x)[1], alone, atol=1e-5)
    assert alone.std(0).min() > 0.01  # the 1-group embedding norm is not degenerate


def test_heads_and_necks_follow_the_models_norm():
    model = tiny_gn_model(transforms=["mlp_head"])
    model.reset_classifier(9)  # every client's fresh head
    assert isinstance(model.classifier[1], nn.GroupNorm) and model.classifier[1].num_groups == 1
    assert model.model_config()["transforms"] == [{"name": "mlp_head"}, {"name": "group_norm"}]
    bnneck = build_model(arch="resnet18", neck="bnneck", transforms=["group_norm"])
    assert isinstance(bnneck.neck.bn, nn.GroupNorm) and not bnneck.neck.bn.bias.requires_grad
    assert float(bnneck.neck.bn.bias.abs().sum()) == 0.0
    with pytest.raises(ConfigError, match="attentive"):
        build_model(arch="resnet18", feat_dim=32, transforms=["group_norm", "attentive_norm"])


# --------------------------------------------------------------------------- the private step
def private_step(model, plan, images, labels, lr=0.0, extra=None):
    """One DP-SGD step the way a client update takes it; returns the gradients the optimiser applied."""
    acc = ClientAccountant()
    with PrivateTraining(model, plan, acc) as session:
        opt = session.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=lr))
        model.train()
        loss = identity_loss(0.1)(model.forward_train(images)[2], labels)
        if extra is not None:
            loss = loss + extra(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    assert not any(hasattr(p, "grad_sample") for p in model.parameters())  # hooks and attributes removed
    return grads, acc


def make_plan(z, c, n=16, batch=4):
    return DPSGDPlan(num_samples=n, sample_rate=batch / n, steps_per_epoch=1, steps_per_round=1,
                     noise_multiplier=z, max_grad_norm=c, delta=1e-5, target_epsilon=None)


def test_per_sample_gradients_are_clipped_to_c_before_averaging():
    model = tiny_gn_model()
    torch.manual_seed(1)
    x, y = torch.randn(4, 3, 32, 16), torch.tensor([0, 1, 2, 3])
    crit = identity_loss(0.1)
    per_sample = []  # reference: one backward pass per image
    model.train()
    for i in range(4):
        model.zero_grad()
        crit(model.forward_train(x[i:i + 1])[2], y[i:i + 1]).backward()
        per_sample.append({n: p.grad.clone() for n, p in model.named_parameters()})
    norms = [torch.sqrt(sum(g.pow(2).sum() for g in d.values())) for d in per_sample]
    c = 0.5 * min(norms).item()  # every sample is clipped
    expected = {n: sum(d[n] * min(1.0, c / norms[i].item()) for i, d in enumerate(per_sample)) / 4
                for n in per_sample[0]}
    grads, acc = private_step(model, make_plan(z=1e-9, c=c), x, y)
    for n, g in grads.items():
        assert torch.allclose(g, expected[n], atol=1e-6, rtol=1e-4), n
    total = torch.sqrt(sum(g.pow(2).sum() for g in grads.values()))
    assert total <= c * (1 + 1e-4)  # the mean of clipped gradients: norm at most C
    plain = sum(d["neck.fc.weight"] for d in per_sample) / 4
    assert not torch.allclose(grads["neck.fc.weight"], plain, rtol=0.1)  # clipping changed the step
    assert acc.history == [(1e-9, 0.25, 1)]


def test_noise_on_an_empty_poisson_batch_has_std_z_c_over_expected_batch():
    model = tiny_gn_model()
    torch.manual_seed(2)
    grads, acc = private_step(model, make_plan(z=1.5, c=2.0, n=32, batch=8),
                              torch.empty(0, 3, 32, 16), torch.empty(0, dtype=torch.long))
    flat = torch.cat([g.reshape(-1) for g in grads.values()]).double()
    assert flat.numel() > 10_000_000
    assert abs(flat.mean().item()) < 1e-3
    assert flat.std().item() == pytest.approx(1.5 * 2.0 / 8, rel=0.01)  # z C / (q N)
    assert acc.steps == 1  # the empty step is still a step of the mechanism


def test_loss_terms_without_per_sample_form_and_foreign_tensors_are_refused():
    model = tiny_gn_model()
    anchor = {n: p.detach() + 0.1 for n, p in model.named_parameters()}
    x, y = torch.randn(4, 3, 32, 16), torch.tensor([0, 1, 2, 3])

    def proximal(m):  # FedProx's term: its gradient does not come from the samples
        return 0.5 * sum((p - anchor[n]).pow(2).sum() for n, p in m.named_parameters())

    with pytest.raises(ConfigError, match="per-sample"):
        private_step(model, make_plan(1.0, 1.0), x, y, extra=proximal)
    with PrivateTraining(model, make_plan(1.0, 1.0), ClientAccountant()) as session:
        copy = [torch.zeros(3, requires_grad=True)]
        with pytest.raises(ConfigError, match="outside the model"):
            session.wrap_optimizer(torch.optim.SGD([*model.parameters(), *copy], lr=0.1))
    with pytest.raises(ConfigError, match="per-sample gradients"):  # BatchNorm model
        with PrivateTraining(build_model(arch="resnet18", feat_dim=32, num_classes=3), make_plan(1.0, 1.0),
                             ClientAccountant()):
            pass


# --------------------------------------------------------------------------- plans and settings
def test_plan_sampling_rate_steps_noise_and_delta(tiny_synth):
    cfg = tiny_config(tiny_synth, rounds=3, dp_sgd=True, noise_multiplier=1.3)
    plan = plan_for(cfg, 32)
    assert (plan.sample_rate, plan.steps_per_epoch, plan.steps_per_round) == (0.25, 2, 2)  # 32 // 8 = 4, capped at 2
    assert (plan.noise_multiplier, plan.max_grad_norm, plan.delta, plan.expected_batch_size) == (1.3, 1.0, 1e-5, 8)
    assert plan_for(cfg, 5).sample_rate == 1.0  # fewer images than a batch: every image every step
    assert plan_for(cfg, 32, {NOISE_KEY: torch.tensor(2.5, dtype=torch.float64)}).noise_multiplier == 2.5
    target = tiny_config(tiny_synth, rounds=3, dp_sgd=True, target_epsilon=6.0)
    derived = plan_for(target, 32)
    assert 6.0 - 0.01 < epsilon(0.25, derived.noise_multiplier, 3 * 2, 1e-5) <= 6.0
    with pytest.raises(ConfigError, match="below 1/N"):
        plan_for(tiny_config(tiny_synth, dp_sgd=True, noise_multiplier=1.0, delta=0.05), 32)


@pytest.mark.parametrize("train,match", [
    (dict(dp_sgd=True, noise_multiplier=0.0), "noise_multiplier must be > 0"),
    (dict(dp_sgd=True, noise_multiplier=-1.0), "noise_multiplier must be > 0"),
    (dict(dp_sgd=True, noise_multiplier=1.0, max_grad_norm=0.0), "max_grad_norm must be > 0"),
    (dict(dp_sgd=True, noise_multiplier=1.0, delta=1.0), "delta must lie in"),
    (dict(dp_sgd=True, target_epsilon=-2.0), "target_epsilon must be > 0"),
    (dict(dp_sgd=True), "needs --noise-multiplier Z or --target-epsilon"),
    (dict(dp_sgd=True, client_dp=True, noise_multiplier=1.0, clip=1.0), "exclude each other"),
    (dict(dp_sgd=True, noise_multiplier=1.0, clip=1.0), "--clip bounds client updates"),
    (dict(dp_sgd=True, noise_multiplier=1.0, triplet_weight=1.0), "triplet"),
    (dict(noise_multiplier=1.0, max_grad_norm=1.0), "given without --dp-sgd or --client-dp"),
])
def test_invalid_dp_settings_are_config_errors(tiny_synth, train, match):
    with pytest.raises(ConfigError, match=match):
        tiny_config(tiny_synth, **train).validate()


@pytest.mark.parametrize("train,match", [
    (dict(delta=0.05), "below 1/N"),  # tiny clients hold 32 images
    (dict(target_epsilon=1e-3, noise_multiplier=None), "unreachable"),
    (dict(target_epsilon=0.5), "exceeded by the first round"),  # fixed noise 1.0 spends more in one round
    (dict(method="ska"), "attentive normalisation"),
    (dict(method="dppt"), "draws its own batches"),
])
def test_settings_checked_against_the_federation_before_training(tiny_synth, tmp_path, train, match):
    cfg = tiny_config(tiny_synth, **{"dp_sgd": True, "noise_multiplier": 1.0, **train})
    with pytest.raises(ConfigError, match=match):
        FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None, build=build_run)
    assert not list(tmp_path.iterdir())  # nothing written


def test_methods_training_outside_per_sample_gradients_are_refused_at_their_first_step(tiny_synth, tmp_path):
    for method, opts, match in (("fedreid", {}, "outside the model"), ("fedprox", {}, "proximal")):
        cfg = tiny_config(tiny_synth, method, rounds=1, dp_sgd=True, noise_multiplier=1.0, method_options=opts)
        with pytest.raises(ConfigError, match=match):
            FederatedEngine(cfg, federation_for_config(cfg), tmp_path / method, progress=False,
                            log=lambda s: None, build=build_run).run()


# --------------------------------------------------------------------------- training runs
def privacy_records(out):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["scope"] == "privacy"]


def test_dp_sgd_trains_one_round_and_accounts_each_client(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=1, dp_sgd=True, noise_multiplier=1.0, max_grad_norm=0.5)
    logs = []
    summary = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=logs.append, build=build_run).run()
    assert any("GroupNorm" in line for line in logs)  # the visible note
    expected = epsilon(8 / 32, 1.0, 2, 1e-5)  # q = B / N, 2 steps (max_steps_per_epoch)
    privacy = summary["privacy"]
    assert privacy["level"] == "record" and privacy["max_grad_norm"] == 0.5 and privacy["stopped"] is None
    assert privacy["epsilon_per_client"] == pytest.approx({"synthA": expected, "synthB": expected})
    assert privacy["epsilon"] == pytest.approx(expected) and "add/remove one image" in privacy["guarantee"]
    records = privacy_records(tmp_path)
    assert [(r["round"], r["client"], r["steps"], r["sample_rate"]) for r in records] == [
        (1, "synthA", 2, 0.25), (1, "synthB", 2, 0.25)]
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert {"name": "group_norm"} in ckpt["model_config"]["transforms"]
    assert ClientAccountant.from_memory(ckpt["client_memory"]["synthA"], HISTORY_KEY).history == [(1.0, 0.25, 2)]
    model = load_model(ckpt, client="synthA")
    assert not any(isinstance(m, BN) for m in model.modules())
    assert all(torch.isfinite(v).all() for v in ckpt["global_state"].values())


@pytest.mark.slow
def test_epsilon_after_resume_equals_uninterrupted_and_budget_stops_an_extended_run(tiny_synth, tmp_path,
                                                                                    monkeypatch):
    cfg = tiny_config(tiny_synth, rounds=2, dp_sgd=True, target_epsilon=8.0, max_steps_per_epoch=1)
    fed = federation_for_config(cfg)
    whole = FederatedEngine(cfg, fed, tmp_path / "whole", progress=False, log=lambda s: None, build=build_run).run()

    kill_in_round(monkeypatch, FederatedEngine(cfg, fed, tmp_path / "killed", progress=False, log=lambda s: None, build=build_run), 2)
    resumed = FederatedEngine(cfg, fed, tmp_path / "killed", progress=False, log=lambda s: None, build=build_run).run(resume=True)
    assert resumed["privacy"]["epsilon_per_client"] == whole["privacy"]["epsilon_per_client"]
    assert privacy_records(tmp_path / "killed") == privacy_records(tmp_path / "whole")
    a, b = (load_checkpoint(tmp_path / d / "ckpt.pt") for d in ("whole", "killed"))
    assert all(torch.equal(a["global_state"][k], b["global_state"][k]) for k in a["global_state"])
    assert 8.0 - 0.01 < whole["privacy"]["epsilon"] <= 8.0  # noise derived for the planned 2 rounds

    longer = tiny_config(tiny_synth, rounds=3, dp_sgd=True, target_epsilon=8.0, max_steps_per_epoch=1)
    logs = []
    extended = FederatedEngine(longer, fed, tmp_path / "killed", progress=False, log=logs.append, build=build_run).run(resume=True)
    assert "privacy budget" in extended["privacy"]["stopped"] and any("privacy budget" in s for s in logs)
    assert load_checkpoint(tmp_path / "killed" / "ckpt.pt")["round"] == 2  # the valid checkpoint of round 2
    assert extended["privacy"]["epsilon"] == whole["privacy"]["epsilon"]
    load_model(tmp_path / "killed" / "ckpt.pt")


# --------------------------------------------------------------------------- command line
def test_cli_dp_flags_train_and_fail_cleanly(tiny_synth, tmp_path):
    from typer.testing import CliRunner

    from privreid.cli import app

    tiny = ["--data", str(tiny_synth), "--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8",
            "--max-steps", "1", "--rounds", "1", "--device", "cpu", "--quiet", "--test-domains", "synthC"]
    runner = CliRunner()
    bad = runner.invoke(app, ["train", *tiny, "--dp-sgd", "--noise-multiplier", "0", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "noise_multiplier must be > 0" in bad.output and not (tmp_path / "x").exists()
    bad = runner.invoke(app, ["train", *tiny, "--dp-sgd", "--client-dp", "--noise-multiplier", "1", "--clip", "1",
                              "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "exclude each other" in bad.output
    ok = runner.invoke(app, ["train", *tiny, "--dp-sgd", "--noise-multiplier", "2", "--max-grad-norm", "0.5",
                             "--delta", "1e-4", "--out", str(tmp_path / "run")])
    assert ok.exit_code == 0, ok.output
    privacy = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    assert privacy["epsilon"] == pytest.approx(epsilon(0.25, 2.0, 1, 1e-4)) and privacy["max_grad_norm"] == 0.5
    assert "GroupNorm" in ok.output


# --------------------------------------------------------------------------- the ledger reads reports, not memory
def _blind_ledger(engine):
    """Make the privacy ledger's round hooks see empty client memories (whatever their signature)."""
    (ledger,) = engine.observers
    before, after = ledger.before_round, ledger.after_round
    ledger.before_round = lambda r, selected, *memories: before(r, selected, *({} for _ in memories))
    ledger.after_round = lambda r, *memories: after(r, *({} for _ in memories))


def test_ledger_accounts_from_uploaded_reports_not_client_memory(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=2, dp_sgd=True, noise_multiplier=1.0, max_steps_per_epoch=1)
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None, build=build_run)
    _blind_ledger(engine)
    uploads = []
    receive = engine.receive
    engine.receive = lambda inbox, upload: (uploads.append(upload), receive(inbox, upload))[1]
    summary = engine.run()
    # q = B / N = 8 / 32, one step a round (max_steps_per_epoch)
    assert [(r["round"], r["client"], r["steps"], r["epsilon"]) for r in privacy_records(tmp_path)] == [
        (n, c, n, pytest.approx(epsilon(0.25, 1.0, n, 1e-5))) for n in (1, 2) for c in ("synthA", "synthB")]
    assert summary["privacy"]["epsilon"] == pytest.approx(epsilon(0.25, 1.0, 2, 1e-5))
    # the client keeps its accountant (client-private) and reports it with every upload
    assert [ClientAccountant.from_memory(u.reports, HISTORY_KEY).history for u in uploads] == [
        [(1.0, 0.25, 1)], [(1.0, 0.25, 1)], [(1.0, 0.25, 2)], [(1.0, 0.25, 2)]]
    assert all(float(u.reports[NOISE_KEY]) == 1.0 and not set(u.reports) & set(u.state) for u in uploads)
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ClientAccountant.from_memory(ckpt["client_memory"]["synthB"], HISTORY_KEY).history == [(1.0, 0.25, 2)]
    reported = ckpt["observer_state"]["privacy"]["dp-sgd"]["reported"]
    assert ClientAccountant.from_memory(reported["synthA"], HISTORY_KEY).history == [(1.0, 0.25, 2)]


def test_resume_restores_the_ledger(tiny_synth, tmp_path, monkeypatch):
    """A run resumed after round 1 accounts exactly as an uninterrupted one."""
    cfg = tiny_config(tiny_synth, rounds=2, dp_sgd=True, target_epsilon=8.0, max_steps_per_epoch=1)
    fed = federation_for_config(cfg)
    whole = FederatedEngine(cfg, fed, tmp_path / "whole", progress=False, log=lambda s: None, build=build_run).run()
    kill_in_round(monkeypatch, FederatedEngine(cfg, fed, tmp_path / "killed", progress=False, log=lambda s: None, build=build_run), 2)
    resumed = FederatedEngine(cfg, fed, tmp_path / "killed", progress=False, log=lambda s: None, build=build_run)
    _blind_ledger(resumed)  # after the restore the ledger reads no client memory
    summary = resumed.run(resume=True)
    assert summary["privacy"]["epsilon_per_client"] == whole["privacy"]["epsilon_per_client"]
    assert privacy_records(tmp_path / "killed") == privacy_records(tmp_path / "whole")
    assert 8.0 - 0.01 < summary["privacy"]["epsilon"] <= 8.0
