"""Issue 41: the strong inversion recipe (signed steps, step schedule, best iterate, restarts), batches with label
recovery, multi-step local updates, and `privreid invert --batch` end to end."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import privreid
from privreid.inversion import INVERSION_ATTACKS, InversionSettings, reconstruct, reconstruct_batch
from privreid.inversion.attack import match_reconstructions
from privreid.inversion.labels import assign_labels, bias_count_labels, count_labels, norm_count_labels
from privreid.inversion.optimise import _optimiser, optimise_image
from privreid.inversion.observation import client_gradient, local_update, to_model_input
from privreid.inversion.threat_models import observe
from privreid.errors import ConfigError
from privreid.losses import identity_loss
from privreid.models import build_model

PIXELS = dict(space="pixels", start="uniform", schedule="none")


class TinyNet(nn.Module):
    """A small classifier with privreid's model interface (``forward_train``, ``classifier``)."""

    def __init__(self, bias: bool = True, classes: int = 10, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Sigmoid(), nn.Flatten())
        self.classifier = nn.Linear(4 * 8 * 8, classes, bias=bias)
        self.num_classes = classes

    def forward(self, x):
        return self.body(x)

    def forward_train(self, x):
        f = self.body(x)
        return f, f, self.classifier(f)


# --------------------------------------------------------------------------- the optimiser
@pytest.mark.parametrize("optimizer,signed", [("adam", True), ("sgd", True), ("sgd", False)])
def test_one_step_moves_each_pixel_by_lr_times_the_sign_or_the_gradient(optimizer, signed):
    """Objective <w, x>: its gradient is w.  Adam's first step is lr * sign(g) for any g (m / sqrt(v) = sign);
    signed SGD steps lr * sign(w); plain SGD lr * w.  Pixels, then boxed to [0, 1]."""
    w = torch.tensor([3.0, -0.001, 0.5, -7.0]).view(1, 1, 2, 2).expand(1, 3, 2, 2)
    start = torch.full((1, 3, 2, 2), 0.5)
    settings = InversionSettings(attack="idlg", iterations=1, lr=0.1, optimizer=optimizer, signed=signed,
                                 select="last", **PIXELS)
    found = optimise_image(start, lambda x: (w * x).sum(), settings=settings)
    expected = start - 0.1 * (w.sign() if signed or optimizer == "adam" else w)
    assert torch.allclose(found.image, expected.clamp(0, 1), atol=1e-6)


def test_the_step_schedule_divides_the_rate_by_ten_at_three_five_and_seven_eighths():
    settings = InversionSettings(iterations=16, lr=0.1)
    x = torch.zeros(1, requires_grad=True)
    opt, schedule = _optimiser(settings, [x])
    rates = []
    for _ in range(16):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    expected = [0.1] * 6 + [0.01] * 4 + [0.001] * 4 + [0.0001] * 2  # milestones 6, 10, 14 of 16
    assert rates == pytest.approx(expected)
    opt, schedule = _optimiser(InversionSettings(iterations=16, schedule="none"), [x])
    for _ in range(16):
        opt.step()
        schedule.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


def _oscillating(record):
    """``(sum(x) - 3)^2`` on 12 pixels starting at 0.5 (sum 6): signed steps of 0.1 overshoot and oscillate."""
    def objective(x):
        value = (x.sum() - 3.0) ** 2
        record.append((float(value.detach()), x.detach().clone()))
        return value
    return objective


def test_best_iterate_selection_returns_the_minimum_objective_iterate():
    start = torch.full((1, 3, 2, 2), 0.5)
    record = []
    settings = InversionSettings(attack="idlg", iterations=9, lr=0.07, select="best", **PIXELS)
    found = optimise_image(start, _oscillating(record), settings=settings)
    assert len(record) == 10  # 9 iterations and the last iterate
    values = [v for v, _ in record]
    best = min(range(10), key=values.__getitem__)
    assert found.value == pytest.approx(values[best]) and torch.equal(found.image, record[best][1])
    assert best != 9 and values[9] > values[best]  # the last iterate is not the best one here
    last = optimise_image(start, _oscillating([]), settings=InversionSettings(
        attack="idlg", iterations=9, lr=0.07, select="last", **PIXELS))
    assert torch.equal(last.image, record[9][1])


def test_restarts_keep_the_start_with_the_lowest_objective():
    starts = torch.stack([torch.full((3, 2, 2), 0.5), torch.full((3, 2, 2), 0.25), torch.full((3, 2, 2), 0.9)])
    settings = InversionSettings(attack="idlg", iterations=3, lr=0.01, **PIXELS)
    each = [optimise_image(s[None], _oscillating([]), settings=settings) for s in starts]
    together = optimise_image(starts, _oscillating([]), settings=InversionSettings(
        attack="idlg", iterations=3, lr=0.01, restarts=3, **PIXELS))
    best = min(each, key=lambda f: f.value)
    assert together.value == best.value and torch.equal(together.image, best.image)
    assert best is each[1]  # sum 3.0 at the start: already the minimum


def test_the_l2rw_preset_is_plain_adam_on_pixels_as_before_the_recipe():
    """L2RW+'s Fig. 8 setting: Adam at lr 0.01 on [0, 1] pixels from uniform noise, boxed, the last iterate,
    bit-identical to that loop written out (the reproduction of Fig. 8 is unchanged)."""
    net = TinyNet()
    x = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(3))
    settings = InversionSettings.preset("l2rw-fig8", iterations=5)
    rec = reconstruct(net, x, 4, threat="full", shared=set(), settings=settings, seed=7)
    g = torch.Generator().manual_seed(7)
    observed = client_gradient(net, x, 4, identity_loss(0.0))
    names = list(observed)
    params = dict(net.named_parameters())
    dummy = torch.rand((1, 3, 8, 8), generator=g).requires_grad_(True)
    adam = torch.optim.Adam([dummy], lr=0.01)
    for _ in range(5):
        grads = torch.autograd.grad(F.cross_entropy(net.forward_train(to_model_input(dummy))[2], torch.tensor([4])),
                                    [params[n] for n in names], create_graph=True)
        loss = sum(((d - observed[n]) ** 2).sum() for d, n in zip(grads, names))
        dummy.grad = torch.autograd.grad(loss, [dummy])[0]
        adam.step()
        with torch.no_grad():
            dummy.clamp_(0, 1)
    assert torch.equal(rec.reconstruction, dummy.detach()[0]) and rec.inferred_label == 4
    assert (InversionSettings.preset("l2rw-fig8").lr, InversionSettings().lr) == (0.01, 0.1)
    with pytest.raises(ConfigError, match="unknown inversion preset"):
        InversionSettings.preset("nope")


# --------------------------------------------------------------------------- labels of a batch
def test_count_labels_by_hand():
    # 2.1 -> 1.1 -> 0.1: class 1 twice, then class 2 (0.9) before class 1's remaining 0.1
    assert count_labels(torch.tensor([0.2, 2.1, 0.9, -0.5]), 3, 1.0) == [1, 1, 2]
    assert assign_labels([1, 1, 2], [2, 5, 1]) == [2, 1, 1]  # 2 and 1 credited; the spare 1 goes to subject 5
    assert assign_labels([4, 4], [4, 4]) == [4, 4]


@pytest.mark.parametrize("bias", [True, False])
def test_batch_labels_from_a_constructed_gradient(bias):
    """The last layer's gradient of a batch with a repeated label: the bias count is exact (-B db_c = n_c -
    sum_i p_ic); the bias-free row-norm count recovers it while the model is unsure (small weights)."""
    torch.manual_seed(0)
    features = torch.randn(4, 64)
    head = nn.Linear(64, 10, bias=bias)
    with torch.no_grad():
        head.weight.mul_(0.01)
    labels = torch.tensor([3, 7, 3, 1])
    loss = F.cross_entropy(head(features), labels)
    grads = torch.autograd.grad(loss, list(head.parameters()))
    if bias:
        p = torch.softmax(head(features), dim=1).detach()
        assert torch.allclose(-4 * grads[1], F.one_hot(labels, 10).sum(0) - p.sum(0), atol=1e-6)
        assert bias_count_labels(grads[1], 4) == [1, 3, 3, 7]
    assert norm_count_labels(grads[0], 4) == [1, 3, 3, 7]


def test_reconstructions_are_matched_to_subjects_by_least_mse():
    subjects = torch.rand(4, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    perm = [2, 0, 3, 1]
    images = subjects[perm] + 0.01
    order = match_reconstructions(subjects, images)
    assert [perm[k] for k in order] == [0, 1, 2, 3]


# --------------------------------------------------------------------------- multi-step local updates
def test_local_update_is_the_gradient_for_one_step_and_two_sgd_steps_otherwise():
    net = TinyNet()
    x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    loss_fn = identity_loss(0.0)
    grads = client_gradient(net, x, [1, 2], loss_fn)
    names = list(grads)
    one = local_update(net, names, lambda: loss_fn(net.forward_train(to_model_input(x))[2], torch.tensor([1, 2])),
                       1, 0.5)
    assert all(torch.allclose(u, grads[n], atol=1e-6) for u, n in zip(one, names))
    copy = TinyNet()
    copy.load_state_dict(net.state_dict())
    opt = torch.optim.SGD(copy.parameters(), lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        loss_fn(copy.forward_train(to_model_input(x))[2], torch.tensor([1, 2])).backward()
        opt.step()
    two = client_gradient(net, x, [1, 2], loss_fn, local_steps=2, local_lr=0.5)
    start, end = dict(net.named_parameters()), dict(copy.named_parameters())
    assert all(torch.allclose(two[n], (start[n] - end[n]) / (0.5 * 2), atol=1e-5) for n in names)
    assert not all(torch.allclose(two[n], grads[n], atol=1e-4) for n in names)


def test_simulating_the_local_steps_matches_the_update_at_the_true_batch_and_one_gradient_does_not():
    from privreid.inversion import optimise

    net = TinyNet()
    x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    obs = observe(net, x, [1, 2], threat="full", shared=set(), loss_fn=identity_loss(0.0), local_steps=3,
                  local_lr=1.0)
    seen = {}
    for update in ("simulate", "gradient"):
        settings = InversionSettings(iterations=1, batch=2, local_steps=3, local_lr=1.0, update=update, tv=0.0,
                                     select="last", schedule="none", space="pixels")

        def record(start, objective, **kw):
            seen[update] = float(objective(x))
            return optimise.Optimised(start, 0.0)

        original = optimise.optimise_image
        optimise.optimise_image = record
        try:
            INVERSION_ATTACKS["ig"].invert_full(net, obs, x.clone(), settings=settings, loss_fn=identity_loss(0.0),
                                               label_smoothing=0.0, generator=None, progress=False)
        finally:
            optimise.optimise_image = original
    assert seen["simulate"] < 1e-6 < 1e-3 < seen["gradient"]


def test_batches_and_local_steps_need_the_full_threat():
    net = build_model("resnet18", num_classes=5, feat_dim=16).eval()
    shared = {n for n, _ in net.named_parameters() if not n.startswith("classifier.")}
    with pytest.raises(ConfigError, match="under --threat full"):
        reconstruct_batch(net, torch.rand(2, 3, 32, 16), [0, 1], threat="shared", shared=shared,
                          settings=InversionSettings(iterations=1, batch=2))


# --------------------------------------------------------------------------- end to end
def test_invert_batch_4_on_a_privreid_checkpoint(tiny_synth, tmp_path):
    from typer.testing import CliRunner

    from conftest import tiny_config
    from privreid.cli import app

    privreid.train_run(tiny_config(tiny_synth, "centralized", rounds=1), tmp_path / "run")
    out = tmp_path / "inv"
    res = CliRunner().invoke(app, ["invert", "--model", str(tmp_path / "run" / "ckpt.pt"), "--subjects", "4",
                                   "--batch", "4", "--iterations", "3", "--restarts", "2", "--device", "cpu",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["batch"] == 4 and metrics["settings"]["restarts"] == 2
    assert "batch 4" in metrics["settings"]["recipe"] and "batch 4" in (out / "summary.md").read_text()
    subjects = metrics["subjects"]
    assert len(subjects) == 4 and {s["label_rule"] for s in subjects} == {"weight-row norm count"}
    assert all(s["label_correct"] == (s["inferred_label"] == s["label"]) for s in subjects)
    res = CliRunner().invoke(app, ["invert", "--model", str(tmp_path / "run" / "ckpt.pt"), "--subjects", "3",
                                   "--batch", "2", "--iterations", "1", "--out", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "not a multiple of --batch 2" in res.output


def test_invert_batch_4_on_a_model_from_elsewhere(tiny_synth, tmp_path):
    from badinput import run_cli
    from model_files import H, W, save_torchreid

    path = save_torchreid(tmp_path / "model.pth.tar-60")
    res = run_cli(("invert", "--model", str(path), "--height", str(H), "--width", str(W), "--data", str(tiny_synth),
                   "--subjects", "4", "--batch", "4", "--iterations", "2", "--local-steps", "2", "--device", "cpu",
                   "--out", str(tmp_path / "inv")))
    assert res.exit_code == 0, res.stderr
    metrics = json.loads((tmp_path / "inv" / "metrics.json").read_text())
    assert metrics["settings"]["batch"] == 4 and metrics["settings"]["local_steps"] == 2
    assert len(metrics["subjects"]) == 4
    assert [s["label_source"] for s in metrics["subjects"]] == ["predicted by the model"] * 4
    images = torch.rand(4, 3, H, W, generator=torch.Generator().manual_seed(0))
    api = privreid.invert(path, images, [0, 1, 2, 3], iterations=2, options={"batch": 4, "signed": False},
                          height=H, width=W)
    assert api.reconstructions.shape == (4, 3, H, W) and "batch 4" in api.recipe and "Adam at lr 0.1" in api.recipe


def test_the_batchnorm_prior_is_zero_at_the_running_statistics_and_refused_without_batchnorm():
    from privreid.inversion.optimise import BatchNormStatistics

    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0)) * 2 + 1
    net = nn.Sequential(nn.BatchNorm2d(3)).eval()
    net[0].running_mean.copy_(x.mean(dim=(0, 2, 3)))
    net[0].running_var.copy_(x.var(dim=(0, 2, 3), unbiased=False))
    with BatchNormStatistics(net) as prior:
        net(x)
        assert float(prior.penalty()) == pytest.approx(0.0, abs=1e-5)
        net(x + 0.5)  # the mean moves by 0.5 in each of 3 channels: ||(0.5, 0.5, 0.5)|| = 0.866
        assert float(prior.penalty()) == pytest.approx(0.75 ** 0.5, rel=1e-4)
    with pytest.raises(ConfigError, match="no BatchNorm2d"):
        BatchNormStatistics(TinyNet())
