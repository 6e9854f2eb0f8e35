"""FedReID's white noise (paper 002, Eq. 14 / 15): trainable parameters only, buffers noise-free."""

import math

import pytest
import torch
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint, load_model
from privreid.cli import app
from privreid.data.catalog import build_federation
from privreid.defenses.beta_noise.mechanism import NoisyAggregate, NoisyStart, add_white_noise, with_beta_noise
from privreid.defenses.client_dp.mechanism import trainable_parameter_names
from privreid.federated.engine import FederatedEngine
from privreid.federated.policy import CLASSIFIER_LOCAL, clone_state
from privreid.federated.registry import get_method
from privreid.federated.strategy import DataVolumeAverage, Upload
from privreid.models import build_model

from conftest import tiny_config
from privreid.composition import build_run

BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def is_buffer(key):
    return key.rpartition(".")[2] in BUFFERS


def test_white_noise_mean_and_variance():
    torch.manual_seed(0)
    state = {"w": torch.full((200_000,), 3.0), "n": torch.tensor(7)}
    noisy = add_white_noise(state, 0.05)
    diff = noisy["w"] - 3.0
    assert abs(diff.mean().item()) < 0.05 * 0.02
    assert diff.std().item() == pytest.approx(0.05, rel=0.02)
    assert noisy["n"].item() == 7 and state["w"].eq(3.0).all()  # ints untouched, input not mutated


def test_white_noise_goes_on_the_named_keys_only():
    state = {"w": torch.zeros(1000), "running_var": torch.ones(1000)}
    noisy = add_white_noise(state, 0.5, keys={"w"})
    assert torch.equal(noisy["running_var"], state["running_var"]) and noisy["running_var"] is not state["running_var"]
    assert noisy["w"].std().item() == pytest.approx(0.5, rel=0.1)


def _uploads(model):
    """Two uploads of a real model's shared state (parameters and BatchNorm buffers), different values."""
    base = CLASSIFIER_LOCAL.shared(model.state_dict())
    other = {k: v + 1 if torch.is_floating_point(v) else v + 3 for k, v in base.items()}
    return [Upload("a", clone_state(base), 1), Upload("b", clone_state(other), 3)]


def test_upload_noise_on_trainable_parameters_only_buffers_exact():
    model = build_model("resnet18", feat_dim=32, neck="bnneck")  # BNNeck: a frozen bias too
    uploads = _uploads(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {"neck.bn.bias"}
    clean = DataVolumeAverage().aggregate({}, uploads).global_state
    torch.manual_seed(1)
    noisy = NoisyAggregate(DataVolumeAverage(), 0.5, trainable).aggregate({}, uploads).global_state
    diffs = []
    torch.manual_seed(1)
    for key, value in clean.items():
        if key in trainable:
            expected = value + 0.5 * torch.randn_like(value)  # the same draws, in key order
            assert torch.equal(noisy[key], expected), key
            diffs.append((noisy[key] - value).flatten())
        else:  # buffers and the frozen bias: transmitted noise-free, bit for bit
            assert is_buffer(key) or key in frozen, key
            assert torch.equal(noisy[key], value), key
    assert torch.cat(diffs).std().item() == pytest.approx(0.5, rel=0.01)
    assert all((noisy[k] > 0).all() for k in noisy if k.endswith("running_var"))


def test_the_defense_noises_the_trainable_parameters_of_the_methods_model(tiny_synth):
    cfg = tiny_config(tiny_synth, beta=0.5)
    strategy = with_beta_noise(get_method("fedpav"), 0.5, "upload").strategy(cfg)
    assert strategy.parameters == trainable_parameter_names(get_method("fedpav"), cfg)
    assert "neck.fc.weight" in strategy.parameters and not any(is_buffer(k) for k in strategy.parameters)


def test_client_start_noise_on_trainable_parameters_only():
    torch.manual_seed(0)
    model = build_model("resnet18", feat_dim=32, neck="bnneck", num_classes=5)
    before = clone_state(model.state_dict())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    seen = []

    class Ctx:
        pass

    ctx = Ctx()
    ctx.model = model
    NoisyStart(lambda c: seen.append(c), 0.2)(ctx)
    assert seen == [ctx]  # the method's own start runs first (FedReID: the half-average)
    after = model.state_dict()
    diffs = []
    for key, value in before.items():
        if key in trainable:  # shared and local ones (Eq. 15: embedding and mapping network)
            assert not torch.equal(after[key], value), key
            diffs.append((after[key] - value).flatten())
        else:
            assert torch.equal(after[key], value), key  # buffers, frozen BNNeck bias
    assert torch.cat(diffs).std().item() == pytest.approx(0.2, rel=0.01)


@pytest.mark.parametrize("mode,upload,download", [("upload", True, False), ("download", False, True),
                                                  ("both", True, True)])
def test_modes_wrap_the_right_hooks(tiny_synth, mode, upload, download):
    cfg = tiny_config(tiny_synth)
    method = with_beta_noise(get_method("fedpav"), 0.5, mode)
    assert isinstance(method.strategy(cfg), NoisyAggregate) == upload
    assert isinstance(method.make_client_start(cfg), NoisyStart) if download else method.make_client_start is None
    g = {"w": torch.ones(2)}
    assert method.strategy(cfg).configure(g, None, {}, 0) is g  # what the server transmits stays noise-free
    fedreid = with_beta_noise(get_method("fedreid"), 0.5, mode)
    if download:  # wraps FedReID's half-average: the noise lands on the half-averaged model
        assert fedreid.make_client_start(cfg).inner is get_method("fedreid").make_client_start(cfg)


def test_beta_run_records_no_formal_guarantee(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=1, beta=0.01, beta_mode="both")
    summary = FederatedEngine(cfg, build_federation(cfg.data.roots, test_domains=["synthC"]), tmp_path,
                              progress=False, build=build_run).run()
    assert summary["privacy"]["epsilon"] is None and "no formal" in summary["privacy"]["guarantee"]


def test_fedpav_at_beta_half_gives_finite_features_and_a_checkpoint(tiny_synth, tmp_path):
    """Regression: noise on running_var made variances negative and features NaN (paper's beta range is [0, 1])."""
    cfg = tiny_config(tiny_synth, rounds=1, beta=0.5)  # upload (Eq. 14), the default mode
    summary = FederatedEngine(cfg, build_federation(cfg.data.roots, test_domains=["synthC"]), tmp_path,
                              progress=False, build=build_run).run()
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert all((v > 0).all() for k, v in ckpt["global_state"].items() if k.endswith("running_var"))
    x = torch.rand(4, 3, 32, 16)
    with torch.no_grad():
        for model in (load_model(ckpt), load_model(ckpt, client="synthA")):
            assert torch.isfinite(model(x)).all()
    assert math.isfinite(summary["global_unseen"]["mAP"]) and "local_seen" in summary


def test_beta_sweep_of_fig3_runs_to_the_end(tiny_synth, tmp_path):
    """Fig. 3 of paper 002 sweeps beta over [0, 1]; `privreid sweep --param beta` must finish every run."""
    out = tmp_path / "sweep"
    res = CliRunner().invoke(app, [
        "sweep", "--param", "beta", "--values", "0,0.5,1", "--out", str(out), "--no-leakage", "--quiet",
        "--device", "cpu", "--method", "fedreid", "--data", str(tiny_synth), "--rounds", "1", "--height", "32",
        "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2", "--test-domains", "synthC"])
    # beta = 0 is the non-private run itself: the sweep adds no separate reference (docs/experiments.md)
    for run in ("beta=0", "beta=0.5"):  # buffers noise-free: these never produce NaN
        assert (out / run / "summary.json").is_file(), res.output
    assert res.exit_code == 0, res.output
    assert not (out / "reference").exists()
    for run in ("beta=0", "beta=0.5", "beta=1"):
        assert (out / run / "summary.json").is_file() and (out / run / "ckpt.pt").is_file(), run
    for run in ("beta=0", "beta=0.5"):  # beta = 1 destroys the weights; below it they still work
        with torch.no_grad():
            assert torch.isfinite(load_model(out / run / "ckpt.pt")(torch.rand(2, 3, 32, 16))).all(), run
