"""Adversarial retrieval attacks: feature-space torchattacks subclasses, evaluation under attack, CLI."""

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch
import torchattacks
from PIL import Image
from typer.testing import CliRunner

from privreid.retrieval_attacks.feature_attacks import (RETRIEVAL_ATTACKS, FeatureAttack, build_attack, check_budget,
                                              feature_objective)
from privreid.retrieval_attacks.retrieval import (evaluate_under_attack, format_table_ix, pixel_transforms,
                                        plot_attack_examples, relative_drop, resolve_methods)
from privreid.cli import app
from privreid.data import ImageDataset
from privreid.data.catalog import federation_for_config
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.models import build_model
from privreid.io import write_csv_rows

from conftest import tiny_config
from privreid.composition import build_run

EPS = 8 / 255
TOL = 1e-6  # float32 rounding of (x + delta) - x


@pytest.fixture(scope="module")
def random_model():
    torch.manual_seed(0)
    return build_model(arch="resnet18", feat_dim=32).eval()


@pytest.fixture(scope="module")
def images():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 3, 32, 16, generator=g)
    x[0, :, :4] = 0.0  # saturated pixels: the attack must stay inside [0, 1]
    x[1, :, -4:] = 1.0
    return x


@pytest.fixture(scope="module")
def trained(learned_identities):
    """conftest's model that learnt synthA's identities: clean retrieval is good and an attack has something to
    destroy."""
    return learned_identities


def run(model, testset, **kw):
    return evaluate_under_attack(model, testset, height=32, width=16, **kw)


# --------------------------------------------------------------------------- the attack classes


def test_attacks_are_torchattacks_subclasses_with_documented_defaults(random_model):
    for name, cls in RETRIEVAL_ATTACKS.items():
        base = getattr(torchattacks, cls.label)  # each built-in subclasses the torchattacks attack it is labelled as
        assert issubclass(cls, base) and issubclass(cls, FeatureAttack) and cls.name == name
        attack = build_attack(name, random_model)
        assert attack.eps == pytest.approx(8 / 255) and attack.alpha == pytest.approx(2 / 255 if cls.iterative
                                                                                        else 8 / 255)
        assert attack.steps == (10 if cls.iterative else 1)
        assert attack.normalization_used is not None  # ImageNet normalisation inside the attack
    assert build_attack("pgd", random_model).random_start is True
    assert build_attack("bim", random_model).random_start is False
    assert build_attack("mifgsm", random_model).decay == 1.0
    ti = build_attack("tifgsm", random_model)
    assert torch.equal(ti.stacked_kernel, torchattacks.TIFGSM(random_model).stacked_kernel)  # torchattacks' kernel
    assert ti.stacked_kernel.shape == (3, 1, 15, 15)


def test_feature_objective_values_and_why_not_plain_distance(random_model, images):
    f = torch.tensor([[1.0, 0.0], [3.0, 4.0]])
    # -||f' + f||^2: -4||f||^2 at the clean feature, 0 at the opposite one
    assert feature_objective(f, f).tolist() == [-4.0, -100.0]
    assert feature_objective(-f, f).tolist() == [0.0, 0.0]
    assert feature_objective(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), f).tolist() == [-2.0, -25.0]
    # at x' = x the squared feature distance has zero gradient (FGSM/BIM would not move); J does not
    x = images.clone()
    ref = random_model(x).detach()
    x.requires_grad_(True)
    feats = random_model(x)
    g_dist = torch.autograd.grad((feats - ref).pow(2).sum(), x, retain_graph=True)[0]
    g_obj = torch.autograd.grad(feature_objective(feats, ref).sum(), x)[0]
    assert g_dist.abs().max() == 0 and g_obj.abs().max() > 0


@pytest.mark.parametrize("method", list(RETRIEVAL_ATTACKS))
def test_perturbation_in_eps_ball_and_unit_range(random_model, images, method):
    attack = build_attack(method, random_model)
    adv = attack.perturb(images)
    delta = adv - images
    assert delta.abs().max() <= EPS + TOL
    assert adv.min() >= 0 and adv.max() <= 1
    assert delta.abs().max() > EPS / 2  # it did move
    assert not random_model.training


@pytest.mark.parametrize("method", list(RETRIEVAL_ATTACKS))
def test_eps_zero_changes_nothing_bit_exact(random_model, images, method):
    adv = build_attack(method, random_model, eps=0.0).perturb(images)
    assert torch.equal(adv, images)


def test_torchattacks_call_contract_with_normalised_inputs(random_model, images):
    attack = build_attack("bim", random_model)
    normalised = attack.normalize(images)
    adv = attack.inverse_normalize(attack(normalised))
    assert (adv - images).abs().max() <= EPS + 1e-5
    assert adv.min() >= -1e-5 and adv.max() <= 1 + 1e-5


@pytest.mark.parametrize("method", ["bim", "pgd", "mifgsm"])
def test_feature_objective_increases_over_steps(random_model, images, method):
    attack = build_attack(method, random_model, eps=16 / 255, alpha=2 / 255, steps=6)
    attack.perturb(images)
    history = attack.loss_history
    assert len(history) == 6
    assert history[-1] > history[0] + 0.05 * abs(history[0])
    if method == "bim":  # starts at the clean image: J = -4 ||f(x)||^2
        clean = random_model(attack.normalize(images)).detach()
        assert history[0] == pytest.approx(float(-4 * clean.pow(2).sum(1).mean()), rel=1e-5)
        assert all(b >= a - 1e-3 * abs(a) for a, b in zip(history, history[1:]))


def test_ti_input_diversity_keeps_aspect_ratio(random_model):
    x = torch.ones(1, 3, 32, 16)
    # torchattacks' own input diversity squashes a 2:1 pedestrian crop into a square
    stock = torchattacks.TIFGSM(random_model, diversity_prob=1.0)
    assert stock.input_diversity(x).shape[-2:] == (16, 16)
    torch.manual_seed(0)
    for rate, canvas in ((0.9, (32, 16)), (1.25, (40, 20))):
        attack = build_attack("tifgsm", random_model)
        attack.diversity_prob, attack.resize_rate = 1.0, rate
        heights = set()
        for _ in range(30):
            out = attack.input_diversity(x)
            assert out.shape[-2:] == canvas
            rows = torch.nonzero(out[0, 0].sum(1) > 0).flatten()
            cols = torch.nonzero(out[0, 0].sum(0) > 0).flatten()
            h, w = int(rows[-1] - rows[0] + 1), int(cols[-1] - cols[0] + 1)
            assert abs(h - 2 * w) <= 1  # 2:1 up to rounding of the width
            heights.add(h)
        assert len(heights) > 1  # the size is random
        assert min(heights) >= min(32, int(32 * rate)) and max(heights) <= max(32, int(32 * rate))
    attack.diversity_prob = 0.0
    assert attack.input_diversity(x) is x


def test_build_attack_errors(random_model):
    with pytest.raises(ConfigError, match="unknown attack"):
        build_attack("deepfool", random_model)
    for eps, alpha, steps, msg in ((-0.1, 0.01, 1, "eps"), (1.5, 0.01, 1, "eps"), (0.1, 0.0, 1, "alpha"),
                                   (0.1, 0.01, 0, "steps"), (0.1, 0.01, 2.5, "steps")):
        with pytest.raises(ConfigError, match=msg):
            check_budget(eps, alpha, steps)
    assert resolve_methods("all") == list(RETRIEVAL_ATTACKS)
    assert resolve_methods("PGD, fgsm,pgd") == ["pgd", "fgsm"]
    with pytest.raises(ConfigError, match="unknown attack"):
        resolve_methods("pgd,cw")


# --------------------------------------------------------------------------- evaluation under attack


@pytest.mark.parametrize("method", list(RETRIEVAL_ATTACKS))
def test_attacks_lower_map_of_a_trained_model(trained, method):
    model, testset = trained
    res = run(model, testset, method=method)
    # the model did learn these identities (clean mAP 0.91-1.00 over 3 seeds x AVX-512 / AVX2 kernels)
    assert res.clean["mAP"] > 0.8 and res.clean["rank1"] >= 0.8
    # mAP drops measured over the same 6 runs: FGSM 0.16-0.41, PGD 0.18-0.44, BIM 0.18-0.44, MI-FGSM 0.19-0.44;
    # TI-FGSM smooths its gradient with a translation kernel, trading white-box strength for transferability
    # (Dong et al. 2019): 0.12-0.30
    assert res.attacked["mAP"] < res.clean["mAP"] - (0.06 if method == "tifgsm" else 0.08)
    for key in ("rank1", "mAP", "mINP"):
        assert res.drop[key] == pytest.approx((res.clean[key] - res.attacked[key]) / res.clean[key])
    assert 0 < res.max_perturbation <= EPS + TOL
    assert res.attacked_images == len(testset.query) and res.feature_shift > 0.1


def test_eps_zero_reproduces_clean_metrics_exactly(trained):
    model, testset = trained
    for method in ("pgd", "tifgsm"):
        res = run(model, testset, method=method, eps=0.0, steps=3, target="both")
        assert res.attacked == res.clean and res.feature_shift == 0.0 and res.max_perturbation == 0.0


def test_targets_max_queries_examples_and_seed(trained):
    model, testset = trained
    q, g = len(testset.query), len(testset.gallery)
    gallery = run(model, testset, method="fgsm", target="gallery")
    both = run(model, testset, method="fgsm", target="both")
    assert gallery.attacked_images == g and both.attacked_images == q + g
    assert gallery.attacked != gallery.clean and gallery.feature_shift > 0.1
    # (gallery alone: see feature_attacks' docstring); measured drop 0.08-0.41 over 3 seeds x 2 kernel settings
    assert both.attacked["mAP"] < both.clean["mAP"] - 0.03
    small = run(model, testset, method="fgsm", max_queries=3, examples=2)
    assert small.attacked_images == 3 and small.example_clean.shape == (2, 3, 32, 16)
    assert small.example_adversarial.shape == (2, 3, 32, 16)
    # the examples are the first (evenly spaced) queries, loaded as [0, 1] pixels
    first = ImageDataset(testset.query[:1], pixel_transforms(32, 16))[0][0]
    assert torch.equal(small.example_clean[0], first)
    # seeded: same result twice, and the caller's RNG is untouched
    state = torch.get_rng_state()
    a = run(model, testset, method="pgd", examples=1, seed=3)
    b = run(model, testset, method="pgd", examples=1, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert a.attacked == b.attacked and torch.equal(a.example_adversarial, b.example_adversarial)
    with pytest.raises(ConfigError, match="target"):
        run(model, testset, method="fgsm", target="everything")
    with pytest.raises(ConfigError, match="max_queries"):
        run(model, testset, method="fgsm", max_queries=0)


# --------------------------------------------------------------------------- tables and pictures


def _record(model, attack, clean, attacked, testset="t"):
    row = {"testset": testset, "model": model, "attack": attack}
    for k in ("rank1", "mAP", "mINP"):
        row[f"clean_{k}"], row[k], row[f"drop_{k}"] = clean, attacked, relative_drop(clean, attacked)
    return row


def test_relative_drop_and_table_ix_layout(tmp_path):
    assert relative_drop(0.8, 0.2) == pytest.approx(0.75)
    assert relative_drop(0.5, 0.6) == pytest.approx(-0.2)
    assert relative_drop(0.0, 0.0) is None
    # Table IX, DNS on SYSU-MM01: r=1 77.27 -> 10.82 under FGSM is the printed 86.0% (85.9% from rounded numbers)
    assert 100 * relative_drop(0.7727, 0.1082) == pytest.approx(86.0, abs=0.05)
    records = [_record("central", "fgsm", 0.8, 0.2), _record("central", "pgd", 0.8, 0.4),
               _record("fed", "fgsm", 0.5, 0.25), _record("fed", "pgd", 0.0, 0.0)]
    table = format_table_ix(records)
    lines = table.splitlines()
    assert lines[0] == "#### t"
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == ["attack", "central R1", "central mAP", "central mINP", "fed R1", "fed mAP", "fed mINP"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:]]
    assert [r[0] for r in body] == ["Clean", "FGSM", "↓", "PGD", "↓"]
    assert body[0][1:] == ["80.0"] * 3 + ["50.0"] * 3
    assert body[1][1:] == ["20.0"] * 3 + ["25.0"] * 3
    assert body[2][1:] == ["75.0%"] * 3 + ["50.0%"] * 3
    assert body[4][1:] == ["50.0%"] * 3 + ["-"] * 3
    path = write_csv_rows(records, tmp_path / "r.csv")
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 and float(rows[0]["drop_mAP"]) == pytest.approx(0.75) and rows[3]["drop_mAP"] == ""


def test_plot_attack_examples(tmp_path, images):
    adv = (images + 4 / 255).clamp(0, 1)
    path = plot_attack_examples(images, {"fgsm": adv, "pgd": images}, EPS, tmp_path / "ex.png", title="t")
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] > im.size[1] / 2
    with pytest.raises(ConfigError, match="shape"):
        plot_attack_examples(images, {"fgsm": adv[:1]}, EPS, tmp_path / "bad.png")


# --------------------------------------------------------------------------- CLI

runner = CliRunner()


@pytest.fixture(scope="module")
def checkpoint(tiny_synth, tmp_path_factory):
    out = tmp_path_factory.mktemp("attack_run") / "central"
    cfg = tiny_config(tiny_synth, "centralized", rounds=1)
    FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, build=build_run).run()
    return out / "ckpt.pt"


def invoke(*args):
    return runner.invoke(app, ["attack", *map(str, args)])


def test_cli_compares_models_in_table_ix_layout(checkpoint, tmp_path):
    copy = tmp_path / "copy" / "ckpt.pt"
    shutil.copytree(Path(checkpoint).parent, copy.parent)  # a run directory is copied whole (client_memory/)
    out = tmp_path / "out"
    res = invoke("--models", checkpoint, copy, "--method", "fgsm,pgd", "--domains", "synthA", "--max-queries", 4,
                 "--eps", "4/255", "--device", "cpu", "--examples", 2, "--out", out)
    assert res.exit_code == 0, res.output
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["eps"] == pytest.approx(4 / 255) and results["settings"]["methods"] == ["fgsm", "pgd"]
    recs = results["results"]
    assert [(r["model"], r["attack"]) for r in recs] == [
        ("centralized (central)", "fgsm"), ("centralized (central)", "pgd"),
        ("centralized (copy)", "fgsm"), ("centralized (copy)", "pgd")]
    # the two checkpoints are the same model: same numbers (seeded attacks)
    for a, b in ((recs[0], recs[2]), (recs[1], recs[3])):
        assert a["mAP"] == b["mAP"] and a["clean_mAP"] == b["clean_mAP"]
    assert all(r["attacked_images"] == 4 and r["max_perturbation"] <= 4 / 255 + TOL for r in recs)
    report = (out / "report.md").read_text()
    assert "| Clean" in report and "| ↓" in report and "centralized (copy) mINP" in report
    assert report.strip() in res.output.replace("\r", "")
    with (out / "results.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 4
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["examples_centralized_central.png", "examples_centralized_copy.png"]


@pytest.mark.parametrize("args, message", [
    (["--method", "deepfool"], "unknown attack"),
    (["--eps", "-1/255"], "eps must be in [0, 1]"),
    (["--eps", "2"], "eps must be in [0, 1]"),
    (["--eps", "eight"], "--eps must be a number or a fraction"),
    (["--eps", "8/0"], "--eps must be a number or a fraction"),
    (["--alpha", "0"], "alpha (step size) must be > 0"),
    (["--steps", "0"], "steps must be an integer >= 1"),
    (["--target", "sideways"], "--target must be one of"),
    (["--max-queries", "0"], "--max-queries must be >= 1"),
])
def test_cli_rejects_bad_options(checkpoint, tmp_path, args, message):
    res = invoke("--model", checkpoint, "--device", "cpu", "--out", tmp_path / "out", *args)
    assert res.exit_code == 2, res.output
    assert f"error: {message}" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cli_checkpoint_errors(tmp_path):
    res = invoke("--model", tmp_path / "missing.pt")
    assert res.exit_code == 2 and "checkpoint not found" in res.output
    partial = tmp_path / "partial.pt"
    torch.save({"format": "privreid-ckpt-v1", "method": "fedpav", "round": 1}, partial)
    res = invoke("--model", partial, "--out", tmp_path / "out")
    assert res.exit_code == 2 and "incomplete: missing config" in res.output
    assert not (tmp_path / "out").exists()
    res = invoke("--method", "pgd")
    assert res.exit_code == 2 and "give a checkpoint" in res.output
