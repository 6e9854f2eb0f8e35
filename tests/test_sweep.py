"""``privreid sweep``: grids x seeds (and the old knob), a non-private reference, resumable; CSVs and plot."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
import yaml
from typer.testing import CliRunner

import privreid.training
from privreid.cli import app
from privreid.errors import ConfigError
from privreid.experiments.sweep import (LeakageSettings, knob_config, knob_grid, parse_grid,
                                        parse_seeds, parse_values, plan_sweep, reference_config, run_sweep,
                                        sweep_arguments, sweep_file_grids)

from conftest import tiny_config


def test_knobs_set_the_config_and_refuse_meaningless_sweeps(tiny_synth):
    base = tiny_config(tiny_synth, "fedpav", rounds=1)
    assert knob_config(base, "beta", 0.3).privacy.beta == 0.3
    with pytest.raises(ConfigError, match="needs --dp-sgd or --client-dp"):
        knob_config(base, "noise-multiplier", 1.0)
    with pytest.raises(ConfigError, match="needs --client-dp"):
        knob_config(base, "clip", 1.0)
    with pytest.raises(ConfigError, match="unknown --param"):
        knob_config(base, "lr", 1.0)
    dp = dataclasses.replace(base, privacy=dataclasses.replace(base.privacy, client_dp=True, clip=1.0,
                                                             noise_multiplier=0.5))
    assert knob_config(dp, "clip", 2.0).privacy.clip == 2.0
    assert (reference_config(dp).privacy.client_dp, reference_config(dp).privacy.clip, reference_config(dp).privacy.noise_multiplier, reference_config(dp).privacy.beta) == (False, None, None, 0.0)
    assert parse_values("0, 0.1,1") == [0.0, 0.1, 1.0]
    for bad in ("", "a,b", "1,1"):
        with pytest.raises(ConfigError):
            parse_values(bad)


def test_grids_seeds_and_sweep_files(tiny_synth, tmp_path):
    g = parse_grid('robustness.defenses.robust-krum={"f": 1},{}')
    assert (g.path, g.values, g.label) == ("robustness.defenses.robust-krum", [{"f": 1}, {}], "robust-krum")
    assert parse_grid("federation.method=fedpav,fedavg").values == ["fedpav", "fedavg"]
    assert parse_seeds("0,1, 2") == [0, 1, 2] and parse_seeds(None) is None
    for bad in ("privacy.beta", "beta=1", "privacy.beta=", "privacy.beta=1,1"):
        with pytest.raises(ConfigError, match="--grid"):
            parse_grid(bad)
    for bad in ("a", "1,1", "-1", ""):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)
    grids, seeds = sweep_file_grids(yaml.safe_load("grid:\n  privacy.beta: [0.0, 0.1]\n  federation.method: fedavg\n"
                                                   "seeds: [3, 4]\n"), "s.yaml")
    assert [(x.path, x.values) for x in grids] == [("privacy.beta", [0.0, 0.1]), ("federation.method", ["fedavg"])]
    assert seeds == [3, 4]
    with pytest.raises(ConfigError, match="--sweep-file bad.yaml: expected a mapping"):
        sweep_file_grids({"grids": {}}, "bad.yaml")
    with pytest.raises(ConfigError, match="give the grid once"):
        sweep_arguments(["privacy.beta=0"], None, None, "beta", "0.1")
    with pytest.raises(ConfigError, match="go together"):
        sweep_arguments([], None, None, "beta", None)

    base = tiny_config(tiny_synth, "fedpav", rounds=1)
    runs = plan_sweep(base, grids, seeds)  # beta=0 is the reference itself: none added
    assert [r.name for r in runs] == ["beta=0,method=fedavg,seed=3", "beta=0.1,method=fedavg,seed=3",
                                      "beta=0,method=fedavg,seed=4", "beta=0.1,method=fedavg,seed=4"]
    assert [(r.seed, r.config.runtime.seed, r.config.federation.method) for r in runs[1:3]] == [(3, 3, "fedavg"),
                                                                                         (4, 4, "fedavg")]
    assert runs[1].cell == {"privacy.beta": 0.1, "federation.method": "fedavg"}
    krum = plan_sweep(base, [g], None)
    assert [(r.name, r.cell) for r in krum] == [('robust-krum=f=1', {"robustness.defenses.robust-krum": '{"f": 1}'}),
                                                ("robust-krum=on", {"robustness.defenses.robust-krum": "{}"})]
    assert krum[0].config.robustness.defenses == {"robust-krum": {"f": 1}}
    knob = plan_sweep(base, [knob_grid("beta", [0.01])], None, knob="beta")
    assert [(r.name, r.cell) for r in knob] == [("reference", {"reference": "non-private"}),
                                                ("beta=0.01", {"privacy.beta": 0.01})]
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        run_sweep(base, [parse_grid("federation.method=fedpav,nope")], None, tmp_path / "x", progress=False)
    with pytest.raises(ConfigError, match="optim has no field"):
        plan_sweep(base, [parse_grid("optim.nope=1")], None)
    assert not (tmp_path / "x").exists()


def test_sweep_trains_measures_and_resumes(tiny_synth, tmp_path, monkeypatch):
    base = tiny_config(tiny_synth, "fedpav", rounds=1)
    leak = LeakageSettings(subjects=1, iterations=2, max_queries=4, pgd_steps=1)
    rows, cells = run_sweep(base, [knob_grid("beta", [0.01, 0.1])], None, tmp_path, knob="beta", leakage=leak,
                            device="cpu", progress=False, echo=lambda _: None)
    assert [r["run"] for r in rows] == ["reference", "beta=0.01", "beta=0.1"]
    for name in ("reference", "beta=0.01", "beta=0.1"):
        assert (tmp_path / name / "summary.json").is_file() and (tmp_path / name / "sweep_eval.json").is_file()
    assert all(r["epsilon"] is None for r in rows)  # beta alone: no accounted epsilon, none invented
    for r in rows:
        assert r["inversion PSNR"] > 0 and 0 <= r["PGD mAP"] <= 1
    with open(tmp_path / "sweep_runs.csv") as fh:
        assert [r["run"] for r in csv.DictReader(fh)] == ["reference", "beta=0.01", "beta=0.1"]
    with open(tmp_path / "sweep.csv") as fh:
        per_cell = list(csv.DictReader(fh))
    assert [c["privacy.beta"] for c in per_cell] == ["", "0.01", "0.1"]
    assert float(per_cell[1]["seen mAP_mean"]) == pytest.approx(rows[1]["seen mAP"])
    assert per_cell[1]["seen mAP_n"] == "1" and float(per_cell[1]["seen mAP_std"]) == 0
    assert (tmp_path / "sweep.png").stat().st_size > 0

    # a second call trains nothing and measures nothing again
    def no_training(*a, **k):
        raise AssertionError("finished runs must be skipped")

    monkeypatch.setattr(privreid.training, "train_run", no_training)
    monkeypatch.setattr("privreid.experiments.sweep._leakage", no_training)
    again, _ = run_sweep(base, [knob_grid("beta", [0.01, 0.1])], None, tmp_path, knob="beta", leakage=leak,
                         device="cpu", echo=lambda _: None)
    assert again == rows


def test_sweep_cli_grid_with_seeds(tiny_synth, tmp_path):
    out = tmp_path / "s"
    res = CliRunner().invoke(app, ["sweep", "--grid", "privacy.beta=0,0.1", "--seeds", "0,1", "--out", str(out),
                                   "--no-leakage", "--quiet", "--data", str(tiny_synth), "--rounds", "1",
                                   "--batch-size", "8", "--max-steps", "1", "--height", "32", "--width", "16",
                                   "--feat-dim", "32", "--device", "cpu", "--test-domains", "synthC"])
    assert res.exit_code == 0, res.output
    assert "beta=0.1" in res.output and "(n=2)" in res.output
    plan = json.loads((out / "runs.json").read_text())
    assert [r["name"] for r in plan["runs"]] == ["beta=0,seed=0", "beta=0.1,seed=0", "beta=0,seed=1",
                                                 "beta=0.1,seed=1"]
    assert all((out / r["name"] / "summary.json").is_file() for r in plan["runs"])
    res = CliRunner().invoke(app, ["status", str(out)])
    assert res.exit_code == 0 and "4 runs: 4 done, 0 running, 0 queued, 0 failed" in res.output


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
    for extra, message in ((["--executor", "slurm"], "choose local or ray"), (["--retries", "-1"], "--retries"),
                           (["--max-concurrent", "2"], "need --executor ray"), (["--seeds", "x"], "--seeds"),
                           (["--grid", "privacy.beta=1"], "give the grid once"),
                           (["--sweep-file", str(tmp_path / "none.yaml")], "none.yaml")):
        res = runner.invoke(app, ["sweep", "--param", "beta", "--values", "0.1", "--out", str(tmp_path / "s"),
                                  *extra])
        assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, extra
    assert not (tmp_path / "s" / "reference").exists()


def test_grid_values_that_would_share_a_run_name_are_refused(tiny_synth):
    """Two values whose names read alike (the number 1 and the string "1") would write one run directory."""
    base = tiny_config(tiny_synth, "fedpav", rounds=1)
    with pytest.raises(ConfigError, match="same run name 'robust-krum=f=1'"):
        plan_sweep(base, [parse_grid('robustness.defenses.robust-krum={"f": 1},{"f": "1"}')], None)
