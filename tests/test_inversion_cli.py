"""`privreid invert`: outputs (metrics.json schema, PNG grid, summary table) and its error paths."""

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint, save_checkpoint
from privreid.cli import app
from privreid.data.catalog import federation_for_config
from privreid.federated.engine import FederatedEngine

from conftest import tiny_config
from privreid.composition import build_run

runner = CliRunner()
METRIC_KEYS = {"mse", "psnr", "ssim", "feature_cosine"}


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def checkpoints(tiny_synth, tmp_path_factory):
    """One-round FedPav and centralised checkpoints on the same tiny data."""
    paths = {}
    for method in ("fedpav", "centralized"):
        cfg = tiny_config(tiny_synth, method, rounds=1)
        out = tmp_path_factory.mktemp(method)
        FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, build=build_run).run()
        paths[method] = out / "ckpt.pt"
    return paths


def error_line(res) -> str:
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output
    return lines[0]


def test_invert_two_models_on_the_same_subjects(checkpoints, tmp_path):
    out = tmp_path / "inv"
    res = invoke("invert", "--models", checkpoints["fedpav"], checkpoints["centralized"], "--subjects", 2, "--index", 1,
                 "--method", "ig", "--iterations", 3, "--device", "cpu", "--out", out)
    assert res.exit_code == 0, res.output
    dirs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(dirs) == 2
    reports = {d.name: json.loads((d / "metrics.json").read_text()) for d in dirs}
    for name, report in reports.items():
        settings = report["settings"]
        assert settings["attack"] == "ig" and settings["match"] == "cosine" and settings["tv"] == 0.2
        assert settings["signed"] and settings["schedule"] == "step" and settings["select"] == "best"
        assert settings["recipe"].startswith("ig (cosine matching, TV 0.2 (anisotropic, normalised); 3 iterations")
        assert settings["iterations"] == 3 and settings["threat"] == "full" and settings["image_size"] == [32, 16]
        assert settings["defense"] == {"beta": 0.0, "download_beta": 0.0, "clip_norm": None, "noise_multiplier": 0.0}
        subjects = report["subjects"]
        assert len(subjects) == 2 and subjects[0]["index"] == 1
        for s in subjects:
            assert set(s["attack"]) == METRIC_KEYS and set(s["random"]) == METRIC_KEYS
            assert s["label_correct"] == (s["inferred_label"] == s["label"]) and s["label_rule"].startswith("idlg")
            assert 0 <= s["attack"]["mse"] <= 1 and -1 <= s["attack"]["feature_cosine"] <= 1
            # PSNR is MSE in dB for [0, 1] images
            assert s["random"]["psnr"] == pytest.approx(-10 * np.log10(s["random"]["mse"]), rel=1e-6)
        summary = report["summary"]
        assert summary["subjects"] == 2
        for key in ("attack", "random"):
            for m in METRIC_KEYS:
                values = [s[key][m] for s in subjects]
                assert summary[key][m]["mean"] == pytest.approx(np.mean(values))
                assert summary[key][m]["std"] == pytest.approx(np.std(values))
        assert summary["label_accuracy"] == pytest.approx(np.mean([s["label_correct"] for s in subjects]))
        with Image.open(dirs[0] / "grid.png") as grid:
            assert grid.format == "PNG" and grid.size[1] > grid.size[0] / 4  # 2 rows of 4 portrait cells
    by_method = {r["settings"]["method"]: r for r in reports.values()}
    fed, central = by_method["fedpav"], by_method["centralized"]
    # same subjects, same random starts: identical baselines image-wise; centralised labels are the pooled ones
    assert [s["path"] for s in fed["subjects"]] == [s["path"] for s in central["subjects"]]
    assert [s["random"]["mse"] for s in fed["subjects"]] == [s["random"]["mse"] for s in central["subjects"]]
    assert {s["client"] for s in central["subjects"]} == {"central"}
    table = (out / "summary.md").read_text()
    assert "fedpav" in table and "centralized" in table and table.count("random image") == 2
    assert "PSNR (dB)" in table and " ± " in table


def test_invert_image_file_shared_feature_and_defenses_as_trained(checkpoints, tmp_path):
    ckpt = load_checkpoint(checkpoints["fedpav"])
    ckpt["config"]["privacy"].update(beta=0.05, beta_mode="upload")
    noisy = save_checkpoint(ckpt, tmp_path / "noisy" / "ckpt.pt")
    image = tmp_path / "person.png"
    Image.fromarray((np.random.default_rng(0).random((32, 16, 3)) * 255).astype(np.uint8)).save(image)
    for flag, beta in (("--defended", 0.05), ("--no-defended", 0.0)):
        out = tmp_path / flag
        res = invoke("invert", "--model", noisy, "--image", image, "--label", 1, "--threat", "shared-feature",
                     "--iterations", 2, "--device", "cpu", flag, "--out", out)
        assert res.exit_code == 0, res.output
        report = json.loads((out / "metrics.json").read_text())
        assert report["settings"]["defense"]["beta"] == beta
        (s,) = report["subjects"]
        assert s["path"] == str(image) and s["index"] is None and s["label"] == 1
        assert s["inferred_label"] is None and s["label_correct"] is None
        assert report["summary"]["label_accuracy"] is None and (out / "grid.png").is_file()


def test_invert_errors(checkpoints, tmp_path):
    fed = checkpoints["fedpav"]
    wrong = tmp_path / "wrong.png"
    Image.new("RGB", (20, 30)).save(wrong)
    assert "resize" in error_line(invoke("invert", "--model", fed, "--image", wrong, "--out", tmp_path / "o"))
    assert "not found" in error_line(invoke("invert", "--model", tmp_path / "missing.pt"))
    assert "out of range" in error_line(invoke("invert", "--model", fed, "--index", 10_000))
    assert "unknown inversion attack" in error_line(invoke("invert", "--model", fed, "--method", "gan"))
    assert "unknown threat" in error_line(invoke("invert", "--model", fed, "--threat", "all"))
    assert "either --index or --image" in error_line(invoke("invert", "--model", fed, "--index", 0, "--image", wrong))
    assert "no client" in error_line(invoke("invert", "--model", fed, "--client", "nobody"))
    assert "--iterations" in error_line(invoke("invert", "--model", fed, "--iterations", 0))
    assert "give a checkpoint" in error_line(invoke("invert"))

    ckpt = load_checkpoint(fed)
    for state in ckpt["client_states"].values():
        for key in [k for k in state if k.startswith("classifier.")]:
            del state[key]
    headless = save_checkpoint(ckpt, tmp_path / "headless" / "ckpt.pt")
    assert "no classifier head" in error_line(invoke("invert", "--model", headless))
    assert not (tmp_path / "o").exists()  # nothing is written before the input is validated


def test_invert_refuses_a_label_outside_the_head(checkpoints, tmp_path):
    image = tmp_path / "p.png"
    Image.new("RGB", (16, 32)).save(image)
    classes = load_checkpoint(checkpoints["fedpav"])["client_classes"]
    n = classes[sorted(classes)[0]]
    assert "out of range" in error_line(invoke("invert", "--model", checkpoints["fedpav"], "--image", image,
                                               "--label", n))
    assert "--label is for --image" in error_line(invoke("invert", "--model", checkpoints["fedpav"], "--label", 0))


def test_invert_a_dppt_run_whose_classifier_every_client_shares(tiny_synth, tmp_path):
    """DPPT's global-label classifier is server-side state, not a client's local key: the client's model is whole
    (it was refused as headless before)."""
    cfg = tiny_config(tiny_synth, "dppt", rounds=1, max_steps_per_epoch=2)
    cfg.data.protocol, cfg.data.train_domains = "by-camera", ["synthA"]
    run = tmp_path / "dppt"
    FederatedEngine(cfg, federation_for_config(cfg), run, progress=False, build=build_run).run()
    ckpt = load_checkpoint(run / "ckpt.pt")
    client = next(iter(ckpt["client_states"]))
    assert not any(k.startswith("classifier.") for k in ckpt["client_states"][client])
    out = tmp_path / "inv"
    res = invoke("invert", "--model", run / "ckpt.pt", "--client", client, "--iterations", 2, "--out", out)
    assert res.exit_code == 0, res.output
    report = json.loads(next(out.rglob("metrics.json")).read_text())
    assert report["subjects"] and all(METRIC_KEYS <= set(s["attack"]) for s in report["subjects"])
