"""A backdoor run's trigger measured by ``privreid eval`` and ``privreid compare --suite poisoning`` (issue 30)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import tiny_config
from privreid.malicious_clients.backdoor import recorded_backdoor
from privreid.data.trigger import Trigger
from privreid.checkpoint import load_model
from privreid.cli import app
from privreid.data.catalog import federation_for_config
from privreid.evaluation.backdoor import evaluate_backdoor
from privreid.training import train_run

TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--rounds", "1", "--device", "cpu", "--quiet"]


def _train(tmp_path, synth, name: str, *extra: str):
    result = CliRunner().invoke(app, ["train", "--data", str(synth), *TINY, "--out", str(tmp_path / name), *extra])
    assert result.exit_code == 0, result.output
    return tmp_path / name / "ckpt.pt"


def test_eval_reports_the_runs_trigger_next_to_the_clean_metrics(tiny_synth, tmp_path):
    ckpt = _train(tmp_path, tiny_synth, "backdoor", "--adversary", "backdoor", "--set", "robustness.adversary.size=4")
    result = CliRunner().invoke(app, ["eval", "--model", str(ckpt), "--device", "cpu", "--json",
                                      str(tmp_path / "eval.json")])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "eval.json").read_text())
    summary = json.loads((ckpt.parent / "summary.json").read_text())["adversary"]["options"]
    [measured] = [r for r in rows if "backdoor" in r]  # targeted: the target's test set only
    assert measured["testset"] == summary["target_domain"]
    bd = measured["backdoor"]
    assert bd["clean_mAP"] == pytest.approx(measured["mAP"]) and bd["clean_rank1"] == pytest.approx(measured["rank1"])
    assert 0 <= bd["asr"] <= bd["asr@5"] <= bd["asr@10"] <= 1 and bd["asr_queries"] > 0
    assert 0 <= bd["targeted_mAP"] <= 1 and "asr_clean_gallery" in bd  # the attacker held 4 of the target's images
    assert f"targeted at identity {summary['target']} of {summary['target_domain']}" in bd["trigger"]
    assert "backdoor of the run: backdoor (targeted" in result.output
    assert all(f"| {column}" in result.output for column in ("ASR", "ASR@5", "ASR@10", "tmAP", "ASR clean gallery"))


def test_a_run_without_a_backdoor_records_no_trigger(tiny_synth):
    assert recorded_backdoor(tiny_config(tiny_synth)) is None
    assert recorded_backdoor(tiny_config(tiny_synth, adversary={"name": "scaled"})) is None
    evasion = recorded_backdoor(tiny_config(tiny_synth, adversary={"name": "dba", "goal": "evasion", "size": 5}))
    assert (evasion.goal, evasion.trigger, evasion.target) == ("evasion", Trigger(5), None)  # the whole patch


@pytest.mark.slow
def test_a_backdoor_run_has_a_higher_asr_than_the_clean_model_and_the_suite_shows_both(tiny_synth, tmp_path):
    """Seeded: one poisoned client of two, a stamped copy (6x6 patch) of each of its images, 6 rounds of 8 steps.

    At this scale a stamped copy of half the images (fraction 0.5) plants no backdoor on this seed: the test
    poisons every image, the strongest setting of the attack."""
    common = dict(rounds=6, max_steps_per_epoch=8, lr_backbone=0.05, seed=0)
    clean_cfg = tiny_config(tiny_synth, **common)
    poisoned_cfg = tiny_config(tiny_synth, **common, adversary={"name": "backdoor", "size": 6, "fraction": 1.0})
    backdoor = recorded_backdoor(poisoned_cfg)
    [testset] = [t for t in federation_for_config(poisoned_cfg).seen if t.name == backdoor.target_domain]
    asr = {}
    for name, cfg in (("clean", clean_cfg), ("poisoned", poisoned_cfg)):
        train_run(cfg, tmp_path / name, progress=False)
        net = load_model(tmp_path / name / "ckpt.pt")
        asr[name] = evaluate_backdoor(net, testset, backdoor, height=32, width=16)["asr"]
    assert asr["poisoned"] > asr["clean"], asr
    result = CliRunner().invoke(app, ["compare", "--models", str(tmp_path / "clean" / "ckpt.pt"),
                                      str(tmp_path / "poisoned" / "ckpt.pt"), "--no-untrained", "--device", "cpu",
                                      "--suite", "poisoning", "--out", str(tmp_path / "report"), "--quiet"])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Backdoors" in report and report.count(f"| {backdoor.target_domain}") == 2  # both models, one trigger
    # the poisoned run's ASR per evaluated round, as recorded in training: its last one is the final model's
    rounds = (tmp_path / "report" / "poisoning_rounds.csv").read_text().splitlines()
    assert rounds[0].startswith("run,round,testset,asr,") and len(rounds) == 2  # the clean run records none
    assert rounds[-1].startswith(f"fedpav (poisoned),6,{backdoor.target_domain},")
    assert float(rounds[-1].split(",")[3]) == pytest.approx(asr["poisoned"])
    assert "![ASR per evaluated round" in report and (tmp_path / "report" / "poisoning_asr.png").is_file()
