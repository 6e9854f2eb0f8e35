"""``privreid flower run --precision``: the sites train, and the coordinator evaluates, at the run's precision."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import yaml

from badinput import run_cli
from conftest import tiny_config
from privreid.checkpoint import load_checkpoint
from privreid.data.catalog import federation_for_config
from privreid.federated.engine import FederatedEngine

pytest.importorskip("flwr")

from privreid.flower.client_app import app as client_app  # noqa: E402
from privreid.flower.loopback import LoopbackGrid  # noqa: E402
from privreid.flower.server_app import ServerSettings, run_server  # noqa: E402
from privreid.flower.messages import RUN, parse_run_record, run_record  # noqa: E402
from privreid.composition import build_run


def test_flower_run_takes_precision_and_sends_it_to_the_sites(tmp_path, monkeypatch):
    """The SuperLink faked: the run's configuration, recorded and sent to every site, holds ``--precision``."""
    from flwr.app import RecordDict

    from privreid.commands.flower import FLOWER_RUN_OPTIONS

    assert "precision" in FLOWER_RUN_OPTIONS
    seen = []

    def fake_run(settings, superlink, **kwargs):
        seen.append(settings.config)
        (settings.out_dir / "summary.json").write_text(json.dumps({"method": "fedpav", "rounds": 1}))

    monkeypatch.setattr("privreid.flower.deployment.run_on_superlink", fake_run)
    out = tmp_path / "fl"
    res = run_cli(("flower", "run", "--insecure", "--rounds", "1", "--precision", "bf16", "--quiet", "--out", str(out)))
    assert res.exit_code == 0, res.stderr
    (config,) = seen
    assert config.runtime.precision == "bf16"
    assert yaml.safe_load((out / "config.yaml").read_text())["precision"] == "bf16"
    sent, _, _ = parse_run_record(RecordDict({RUN: run_record(config, "key")}))  # what a site reads
    assert sent.runtime.precision == "bf16"


def test_flower_run_refuses_fp16_with_dp_sgd_in_one_line(tmp_path):
    res = run_cli(("flower", "run", "--insecure", "--precision", "fp16", "--set", "privacy.dp_sgd=true",
                   "--set", "privacy.noise_multiplier=1.0", "--out", str(tmp_path / "fl")))
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert res.stderr.startswith("error: --dp-sgd with --precision fp16 is not supported")
    assert not (tmp_path / "fl").exists()


def test_bf16_on_flower_equals_bf16_in_process(tiny_synth, tmp_path):
    """Two sites over Flower's wire (loopback) train in bf16 exactly as the in-process engine does."""
    cfg = tiny_config(tiny_synth, rounds=1)
    cfg = cfg.with_values({"runtime.precision": "bf16"})
    FederatedEngine(cfg, federation_for_config(cfg), tmp_path / "inproc", progress=False, build=build_run).run()
    grid = LoopbackGrid(client_app, {11: {"data": str(tiny_synth / "synthA"), "state-dir": str(tmp_path / "a")},
                                     22: {"data": str(tiny_synth / "synthB"), "state-dir": str(tmp_path / "b")}})
    run_server(grid, ServerSettings(cfg, tmp_path / "flower", poll=0.0), log=lambda msg: None)
    ours, theirs = (load_checkpoint(tmp_path / d / "ckpt.pt") for d in ("flower", "inproc"))
    assert ours["config"]["runtime"]["precision"] == "bf16"
    for key, value in theirs["global_state"].items():
        assert torch.equal(value, ours["global_state"][key]), key
