"""Evaluation cadence: after the last round only by default, every k rounds when asked, shown at the start."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint
from privreid.cli import app
from privreid.config import EvaluationConfig, RunConfig
from conftest import with_fields
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.training import eval_cadence

TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet", "--test-domains", "synthC"]
PRESETS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))


def evaluated_rounds(rounds: int, **train) -> list[int]:
    engine = SimpleNamespace(config=with_fields(RunConfig(), rounds=rounds, **train))
    return [r for r in range(1, rounds + 1) if FederatedEngine.evaluates(engine, r)]


def test_default_evaluates_after_the_last_round_only():
    assert EvaluationConfig().every == 0
    assert evaluated_rounds(7) == [7]
    assert evaluated_rounds(7, every=3) == [3, 6, 7]
    assert evaluated_rounds(6, every=3) == [3, 6]
    assert evaluated_rounds(3, every=1) == [1, 2, 3]
    assert evaluated_rounds(3, every=10) == [3]


def test_negative_cadence_is_refused():
    with pytest.raises(ConfigError, match="eval_every must be >= 0"):
        RunConfig(evaluation=EvaluationConfig(every=-1)).validate()


@pytest.mark.parametrize("rounds, every, text", [
    (10, 0, "evaluating after the last round (10) only"),
    (10, 10, "evaluating after the last round (10) only"),
    (10, 20, "evaluating after the last round (10) only"),
    (10, 1, "evaluating after every round"),
    (10, 4, "evaluating every 4 rounds and after the last (10)"),
])
def test_cadence_in_words(rounds, every, text):
    assert eval_cadence(with_fields(RunConfig(), rounds=rounds, every=every)) == text


@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_every_preset_states_its_cadence(preset):
    """The README's tables come from presets; none of them may depend on the default cadence."""
    values = yaml.safe_load(preset.read_text())
    assert isinstance(values.get("eval-every"), int) and values["eval-every"] >= 1, preset.name


def test_cadence_is_shown_and_changes_no_weight(tiny_synth, tmp_path):
    """The default run evaluates once, says so at the start, and trains exactly the weights of a run that
    evaluates every round (evaluation draws nothing from the training random streams)."""
    runner = CliRunner()
    args = ["train", "--data", str(tiny_synth), "--rounds", "2", *TINY]
    default = runner.invoke(app, [*args, "--out", str(tmp_path / "default")])
    assert default.exit_code == 0, default.output
    assert "evaluating after the last round (2) only" in default.output
    every = runner.invoke(app, [*args, "--eval-every", "1", "--out", str(tmp_path / "every")])
    assert every.exit_code == 0, every.output
    assert "evaluating after every round" in every.output

    def global_rounds(run: str) -> set[int]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return {r["round"] for r in map(json.loads, lines) if r.get("scope") == "global"}

    assert global_rounds("default") == {2} and global_rounds("every") == {1, 2}
    a, b = (load_checkpoint(tmp_path / run / "ckpt.pt") for run in ("default", "every"))
    assert a["global_state"].keys() == b["global_state"].keys()
    assert all(torch.equal(a["global_state"][k], b["global_state"][k]) for k in a["global_state"])
