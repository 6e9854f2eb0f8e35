"""``privreid compare --suite``: one report with clean, attack, corruption and inversion results on the same data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privreid.cli import app
from privreid.data.catalog import federation_for_config
from privreid.errors import ConfigError
from privreid.evaluation.corrupted_eval import IMPLEMENTATION_DEVIATION
from privreid.federated.engine import FederatedEngine
from privreid.api import run_suite
from privreid.comparison import SuiteSettings

from conftest import tiny_config
from privreid.composition import build_run


@pytest.fixture(scope="module")
def two_runs(tiny_synth, tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    paths = []
    for method in ("centralized", "fedpav"):
        cfg = tiny_config(tiny_synth, method, rounds=1)
        FederatedEngine(cfg, federation_for_config(cfg), root / method, progress=False, build=build_run).run()
        paths.append(root / method / "ckpt.pt")
    return paths


def _rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_full_suite_writes_every_section_for_every_model(two_runs, tmp_path):
    settings = SuiteSettings(testsets="unseen", attacks=["fgsm", "pgd"], steps=2, max_queries=5,
                             corruptions=["noise", "all"], corruption_repeats=2, inversion_subjects=1,
                             inversion_iterations=3)
    result = run_suite(two_runs, tmp_path, settings, device="cpu")
    report = (tmp_path / "report.md").read_text()
    for heading in ("Clean retrieval", "Adversarial queries", "Corruptions", "Gradient inversion"):
        assert heading in report
    # 2 models x 1 unseen test set x 2 attacks / 2 corruption units
    attacks, corruptions = _rows(tmp_path / "attacks.csv"), _rows(tmp_path / "corruptions.csv")
    assert len(attacks) == 4 and len(corruptions) == 4
    assert {r["model"] for r in attacks} == {"centralized (centralized)", "fedpav (fedpav)"}
    for r in corruptions:  # the drop is the relative change of the mean over the repeats
        clean, mean = float(r["clean_mAP"]), float(r["mAP"])
        assert float(r["drop_mAP"]) == pytest.approx((clean - mean) / clean)
        assert int(r["repeats"]) == 2
    assert len(_rows(tmp_path / "clean.csv")) == 3  # untrained + 2 models
    # CIL-ReID's pixel scale, but not its 10 repeats: the title and the deviations say so
    assert "## Corruptions (CIL-ReID protocol: " in report and "over 2 repeats (CIL-ReID: 10)" in report
    assert result["deviations"] == [IMPLEMENTATION_DEVIATION, "corrupted evaluation repeated 2 time(s) (CIL-ReID: 10)"]
    assert "## Deviations\n\n- corruptions: frost uses procedural textures" in report
    assert "\n- corrupted evaluation repeated 2 time(s)" in report
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["deviations"] == result["deviations"] and saved["settings"]["pixel_scale"] == 1.0
    assert (tmp_path / "drops.png").stat().st_size > 0
    assert [m["name"] for m in result["inversion"]["models"]] == ["centralized (centralized)", "fedpav (fedpav)"]
    for m in result["inversion"]["models"]:
        assert (tmp_path / "inversion").exists() and m["summary"]["subjects"] == 1
        assert m["grid"] in {str(p) for p in (tmp_path / "inversion").rglob("grid.png")}
    # the aggregate threat, per model: the single-upload reference and the sum of the run's clients per round
    agg = result["inversion"]["aggregate"]["models"]
    assert [(m["name"], m["row"], m["clients"]) for m in agg] == [
        ("centralized (centralized)", "single upload", None), ("centralized (centralized)", "aggregate of 1", 1),
        ("fedpav (fedpav)", "single upload", None), ("fedpav (fedpav)", "aggregate of 2", 2)]
    assert "## Gradient inversion under secure aggregation" in report and "fedpav (fedpav): aggregate of 2" in report
    central_ref, central_m1, fed_ref, fed_m2 = (json.loads((Path(m["dir"]) / "metrics.json").read_text())
                                                for m in agg)
    # no defenses were trained: the centralised run's one "upload" is its own, the same reconstruction
    assert central_m1["subjects"][0]["attack"] == central_ref["subjects"][0]["attack"]
    assert fed_m2["subjects"][0]["attack"] != fed_ref["subjects"][0]["attack"]
    assert len(fed_m2["subjects"][0]["aggregated_with"]) == 1 and fed_m2["subjects"][0]["path"] == \
        central_ref["subjects"][0]["path"]  # the same subject for every model
    rows = _rows(tmp_path / "inversion.csv")
    assert [(r["model"], r["threat"], r["clients"]) for r in rows] == [
        ("centralized (centralized)", "full", ""), ("fedpav (fedpav)", "full", ""),
        ("centralized (centralized)", "shared-feature", ""), ("centralized (centralized)", "aggregate", "1"),
        ("fedpav (fedpav)", "shared-feature", ""), ("fedpav (fedpav)", "aggregate", "2")]
    assert float(rows[-1]["feature_cosine"]) == pytest.approx(agg[-1]["summary"]["attack"]["feature_cosine"]["mean"])
    assert (tmp_path / "inversion.png").stat().st_size > 0 and "![leakage per threat](inversion.png)" in report


def test_suite_aggregate_threat_with_given_m_names_a_model_it_cannot_attack(two_runs, tmp_path):
    settings = SuiteSettings(suites=["inversion"], testsets="unseen", inversion_subjects=1, inversion_iterations=2,
                             inversion_threat="shared-feature", inversion_clients=[2])
    result = run_suite(two_runs, tmp_path, settings, device="cpu")
    agg = result["inversion"]["aggregate"]["models"]
    assert [(m["name"], m["row"]) for m in agg[:2]] == [("fedpav (fedpav)", "single upload"),
                                                        ("fedpav (fedpav)", "aggregate of 2")]
    assert agg[2]["name"] == "centralized (centralized)" and "no client besides" in agg[2]["refused"]
    report = (tmp_path / "report.md").read_text()
    assert "Not attacked: centralized (centralized) (--clients 2:" in report
    # the suite's single-upload shared-feature row and the aggregate's reference are the same attack
    single = json.loads((tmp_path / "inversion" / "fedpav_fedpav" / "metrics.json").read_text())
    reference = json.loads((Path(agg[0]["dir"]) / "metrics.json").read_text())
    assert single["subjects"][0]["attack"] == reference["subjects"][0]["attack"]


def test_suite_settings_are_validated(two_runs, tmp_path):
    with pytest.raises(ConfigError, match="unknown suite"):
        run_suite(two_runs, tmp_path, SuiteSettings(suites=["clean", "weather"]))
    with pytest.raises(ConfigError, match="testsets"):
        run_suite(two_runs, tmp_path, SuiteSettings(testsets="nowhere"))
    with pytest.raises(ConfigError, match="unknown corruption"):
        run_suite(two_runs, tmp_path, SuiteSettings(corruptions=["hail"]))
    with pytest.raises(ConfigError, match="always includes the aggregate threat"):
        run_suite(two_runs, tmp_path, SuiteSettings(inversion_threat="aggregate"))
    with pytest.raises(ConfigError, match="positive integers"):
        run_suite(two_runs, tmp_path, SuiteSettings(inversion_clients=[0]))
    assert not (tmp_path / "report.md").exists()


def test_compare_cli_suite_and_errors(two_runs, tmp_path):
    runner = CliRunner()
    out = tmp_path / "report"
    res = runner.invoke(app, ["compare", "--models", str(two_runs[0]), str(two_runs[1]), "--suite", "clean,attacks",
                              "--attacks", "fgsm", "--testsets", "unseen", "--max-queries", "4", "--out", str(out),
                              "--device", "cpu", "--quiet"])
    assert res.exit_code == 0, res.output
    assert "Table IX" in (out / "report.md").read_text() and len(_rows(out / "attacks.csv")) == 2
    res = runner.invoke(app, ["compare", str(two_runs[0]), "--suite", "clean"])
    assert res.exit_code == 2 and "--suite needs --out" in res.output
    res = runner.invoke(app, ["compare", str(two_runs[0]), "--suite", "attacks", "--attacks", "cw", "--out", str(out)])
    assert res.exit_code == 2 and "unknown attack" in res.output
    res = runner.invoke(app, ["compare"])
    assert res.exit_code == 2 and "give a checkpoint with --model" in res.output


def test_scaled_corruptions_are_titled_scaled_and_listed_as_deviations(two_runs, tmp_path):
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["compare", str(two_runs[0]), "--suite", "corruptions", "--corruptions", "fog",
                                   "--repeats", "10", "--pixel-scale", "auto", "--testsets", "unseen", "--out",
                                   str(out), "--device", "cpu", "--quiet"])
    assert res.exit_code == 0, res.output
    report = (out / "report.md").read_text()
    assert "## Corruptions (CIL-ReID corruptions, scaled (pixel scale sqrt(H*W)/224; CIL-ReID: 1)" in report
    assert "over 10 repeats)" in report and "CIL-ReID protocol" not in report
    [_, line] = json.loads((out / "report.json").read_text())["deviations"]
    assert line.startswith("corruptions scaled: ImageNet-C pixel lengths multiplied by sqrt(H*W)/224") and line in report
