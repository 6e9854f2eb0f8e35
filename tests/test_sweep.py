"""``privreid sweep``: one run per knob value plus a non-private reference; resumable; CSV and plot."""

from __future__ import annotations

import csv
import dataclasses

import pytest
from typer.testing import CliRunner

import privreid.training
from privreid.cli import app
from privreid.errors import ConfigError
from privreid.experiments.sweep import LeakageSettings, knob_config, parse_values, reference_config, run_sweep

from conftest import tiny_config


def test_knobs_set_the_config_and_refuse_meaningless_sweeps(tiny_synth):
    base = tiny_config(tiny_synth, "fedpav", rounds=1)
    assert knob_config(base, "beta", 0.3).train.beta == 0.3
    with pytest.raises(ConfigError, match="needs --dp-sgd or --client-dp"):
        knob_config(base, "noise-multiplier", 1.0)
    with pytest.raises(ConfigError, match="needs --client-dp"):
        knob_config(base, "clip", 1.0)
    with pytest.raises(ConfigError, match="unknown --param"):
        knob_config(base, "lr", 1.0)
    dp = dataclasses.replace(base, train=dataclasses.replace(base.train, client_dp=True, clip=1.0,
                                                             noise_multiplier=0.5))
    assert knob_config(dp, "clip", 2.0).train.clip == 2.0
    ref = reference_config(dp).train
    assert (ref.client_dp, ref.clip, ref.noise_multiplier, ref.beta) == (False, None, None, 0.0)
    assert parse_values("0, 0.1,1") == [0.0, 0.1, 1.0]
    for bad in ("", "a,b", "1,1"):
        with pytest.raises(ConfigError):
            parse_values(bad)


def test_sweep_trains_measures_and_resumes(tiny_synth, tmp_path, monkeypatch):
    base = tiny_config(tiny_synth, "fedpav", rounds=1)
    leak = LeakageSettings(subjects=1, iterations=2, max_queries=4, pgd_steps=1)
    rows = run_sweep(base, "beta", [0.01, 0.1], tmp_path, leakage=leak, device="cpu", progress=False,
                     echo=lambda _: None)
    assert [r["run"] for r in rows] == ["reference", "beta=0.01", "beta=0.1"]
    for name in ("reference", "beta=0.01", "beta=0.1"):
        assert (tmp_path / name / "summary.json").is_file() and (tmp_path / name / "sweep_eval.json").is_file()
    assert all(r["epsilon"] is None for r in rows)  # beta alone: no accounted epsilon, none invented
    for r in rows:
        assert r["inversion PSNR"] > 0 and 0 <= r["PGD mAP"] <= 1
    with open(tmp_path / "sweep.csv") as fh:
        assert [r["run"] for r in csv.DictReader(fh)] == ["reference", "beta=0.01", "beta=0.1"]
    assert (tmp_path / "sweep.png").stat().st_size > 0

    # a second call trains nothing and measures nothing again
    def no_training(*a, **k):
        raise AssertionError("finished runs must be skipped")

    monkeypatch.setattr(privreid.training, "train_run", no_training)
    monkeypatch.setattr("privreid.experiments.sweep._leakage", no_training)
    again = run_sweep(base, "beta", [0.01, 0.1], tmp_path, leakage=leak, device="cpu", echo=lambda _: None)
    assert again == rows


def test_sweep_cli_errors(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["sweep", "--param", "beta", "--values", "0.1", "--out", str(tmp_path / "s"),
                              "--method", "fedpav", "--resume"])
    assert res.exit_code == 2 and "the sweep sets these itself" in res.output
    res = runner.invoke(app, ["sweep", "--param", "noise-multiplier", "--values", "1", "--out", str(tmp_path / "s"),
                              "--method", "fedpav"])
    assert res.exit_code == 2 and "needs --dp-sgd" in res.output
    res = runner.invoke(app, ["sweep", "--param", "beta", "--values", "0.1", "--out", str(tmp_path / "s"),
                              "--no-such-train-flag"])
    assert res.exit_code == 2 and "train options" in res.output
    assert not (tmp_path / "s" / "reference").exists()
