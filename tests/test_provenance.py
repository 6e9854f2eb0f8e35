"""Run provenance (config.yaml, env.json, log.txt, --logger tensorboard), the run lock, failed writes, divergence,
and a DP budget that stops training early (issue 13, sections 2 and 4)."""

import errno
import json
import math
import os
import warnings

import pytest
import yaml
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint
from privreid.cli import app
from privreid.commands.sweep import base_config
from privreid.config import RunConfig
from privreid.rundir import LOCK_FILE, RunLock
from privreid.composition import method_of

runner = CliRunner()
TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet", "--test-domains", "synthC"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_train_writes_provenance_and_config_yaml_reruns_the_same_configuration(tiny_synth, tmp_path):
    out = tmp_path / "run"
    res = invoke("train", "--data", tiny_synth, "--rounds", 1, *TINY, "--lr-backbone", "0.02", "--opt", "mu=0.5",
                 "--method", "fedprox", "--seed", 3, "--out", out, "--logger", "tensorboard")
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    files = summary["files"]
    assert {k: os.path.basename(v) for k, v in files.items()} == {
        "checkpoint": "ckpt.pt", "metrics": "metrics.jsonl", "config": "config.yaml", "environment": "env.json",
        "log": "log.txt", "tensorboard": "tensorboard"}
    assert all(os.path.exists(v) for v in files.values())

    # config.yaml round-trips through the typed preset parsing to the checkpoint's configuration
    saved = RunConfig.from_dict(load_checkpoint(out / "ckpt.pt")["config"])
    assert base_config(["--config", str(out / "config.yaml")]) == saved
    preset = yaml.safe_load((out / "config.yaml").read_text())
    assert preset["lr-backbone"] == 0.02 and preset["opt"] == ["mu=0.5"] and "out" not in preset

    env = json.loads((out / "env.json").read_text())
    import torch
    assert env["packages"]["torch"] == torch.__version__.split("+")[0] or env["packages"]["torch"] == torch.__version__
    assert env["seed"] == 3 and env["device"] == "cpu" and env["privreid"]
    assert set(env["packages"]) >= {"torch", "opacus", "flwr", "kornia", "torchattacks"}
    assert "python" in env and "cuda" in env and "git_commit" in env

    log = (out / "log.txt").read_text()
    assert "fedprox: 2 client(s)" in log and "round 1 global unseen synthC" in log

    # TensorBoard: the event file holds every metric record's numbers
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    unseen = next(r for r in records if r["scope"] == "global" and r["testset"] == "synthC")
    events = acc.Scalars("global/unseen/synthC/mAP")
    assert [(e.step, e.value) for e in events] == [(1, pytest.approx(unseen["mAP"], abs=1e-6))]
    train = next(r for r in records if r["scope"] == "train")
    assert acc.Scalars(f"train/{train['client']}/loss")[0].value == pytest.approx(train["loss"], rel=1e-6)
    # ... the learning rate per round, the resolved configuration and the hyperparameters (HParams tab)
    from tensorboard.plugins.hparams import plugin_data_pb2

    from privreid.federated.lr_schedule import lr_table

    rate = lr_table(saved, method_of(saved))["backbone"][0]
    assert [(e.step, e.value) for e in acc.Scalars("lr/backbone")] == [(1, pytest.approx(rate))]
    assert "config/text_summary" in acc.Tags()["tensors"]
    start = plugin_data_pb2.HParamsPluginData.FromString(
        acc.SummaryMetadata("_hparams_/session_start_info").plugin_data.content).session_start_info
    assert start.hparams["optim.lr_backbone"].number_value == pytest.approx(0.02)
    assert start.hparams["federation.method"].string_value == "fedprox"


def test_log_txt_holds_warnings_and_the_error(tmp_path):
    from privreid.provenance import run_log
    from privreid.errors import ConfigError

    with pytest.raises(ConfigError):
        with run_log(tmp_path):
            print("hello")
            warnings.warn("careful now")
            raise ConfigError("bad thing")
    log = (tmp_path / "log.txt").read_text()
    assert " INFO hello\n" in log and " WARNING UserWarning: careful now\n" in log
    assert log.strip().endswith(" ERROR bad thing")


def test_env_json_tolerates_absent_packages():
    from privreid.provenance import environment, package_version

    assert package_version("surely-not-installed-pkg") is None
    env = environment(device="cpu", seed=1)
    assert json.loads(json.dumps(env)) == env


def test_env_json_records_the_float_kernels(monkeypatch):
    """The kernels that decide a CPU run's bits (README "The demo"): ATen's capability and the variables that force them."""
    import torch

    from privreid.provenance import environment

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    kernels = environment(device="cpu", seed=0)["float_kernels"]
    assert kernels["aten_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert kernels["torch_threads"] == torch.get_num_threads()
    assert kernels["variables"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and kernels["variables"]["MKL_CBWR"] is None


def test_logger_wandb_without_the_package_is_one_line(tiny_synth, tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_wandb(name, *a, **k):
        if name == "wandb":
            raise ModuleNotFoundError("No module named 'wandb'", name="wandb")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    res = invoke("train", "--data", tiny_synth, "--rounds", 1, *TINY, "--out", tmp_path / "o", "--logger", "wandb")
    one_line_error(res, "pip install 'privreid[wandb]'")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- the lock (4a.1)
def test_a_second_run_on_a_locked_out_is_refused_and_a_stale_lock_is_taken_over(tiny_synth, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    held = RunLock(out).acquire()  # another process's lock: flock conflicts between open file descriptions
    try:
        res = invoke("train", "--data", tiny_synth, "--rounds", 1, *TINY, "--out", out)
        one_line_error(res, "in use by another privreid run", f"pid {os.getpid()}")
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    finally:
        held.release()
    (out / LOCK_FILE).write_text("999999999\n")  # a killed run's lock: dead pid, no flock held
    res = invoke("train", "--data", tiny_synth, "--rounds", 1, *TINY, "--out", out)
    assert res.exit_code == 0, res.output
    assert not (out / LOCK_FILE).exists()


# --------------------------------------------------------------------------- a failed checkpoint write
def test_disk_full_keeps_the_previous_checkpoint_and_says_so(tiny_synth, tmp_path, monkeypatch):
    import privreid.checkpoint as ckpt_module

    out = tmp_path / "run"
    real_save, calls = ckpt_module.torch.save, []

    def save(obj, fh, *a, **k):
        if not (isinstance(obj, dict) and "round" in obj):  # a client memory file (client_memory/), not ckpt.pt
            return real_save(obj, fh, *a, **k)
        calls.append(obj["round"])
        if obj["round"] == 2:
            fh.write(b"partial bytes")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, fh, *a, **k)

    monkeypatch.setattr(ckpt_module.torch, "save", save)
    res = invoke("train", "--data", tiny_synth, "--rounds", 3, *TINY, "--out", out)
    one_line_error(res, "No space left on device", "disk full", "checkpoint of round 1", "is intact", "--resume")
    assert calls == [1, 2]
    assert load_checkpoint(out / "ckpt.pt")["round"] == 1
    assert not list(out.glob(".*.tmp")) and not (out / LOCK_FILE).exists()
    assert "No space left on device" in (out / "log.txt").read_text()


# --------------------------------------------------------------------------- divergence (4a.5)
def test_divergence_stops_with_one_line_keeps_the_last_good_checkpoint_and_writes_valid_json(tiny_synth, tmp_path,
                                                                                             monkeypatch):
    from privreid.federated import client as client_module

    out = tmp_path / "run"
    real = client_module.SupervisedUpdate.__call__

    def diverging(self, ctx):
        metrics = real(self, ctx)
        return {**metrics, "loss": math.nan} if ctx.round == 1 else metrics  # round 2 (0-based 1) blows up

    monkeypatch.setattr(client_module.SupervisedUpdate, "__call__", diverging)
    res = invoke("train", "--data", tiny_synth, "--rounds", 3, *TINY, "--out", out)
    one_line_error(res, "training diverged in round 2", "checkpoint of round 1", "is kept")
    assert load_checkpoint(out / "ckpt.pt")["round"] == 1
    lines = (out / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} token")) for line in lines]
    assert any(r["round"] == 2 and r["scope"] == "train" and r["loss"] is None for r in records)


def test_a_huge_finite_learning_rate_diverges_to_one_line(tiny_synth, tmp_path):
    res = invoke("train", "--data", tiny_synth, "--rounds", 2, *TINY, "--lr-backbone", "1e30", "--lr-head", "1e30",
                 "--out", tmp_path / "run")
    one_line_error(res, "training diverged in round 1", "no checkpoint was written", "--lr-backbone")
    for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} token"))


def test_json_line_never_writes_bare_nan():
    from privreid.federated.divergence import json_line

    assert json.loads(json_line({"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf}})) == \
        {"a": None, "b": [None, 1.5], "c": {"d": None}}


# --------------------------------------------------------------------------- DP budget stops early (4a.3)
def test_dp_budget_stop_evaluates_the_final_model(tiny_synth, tmp_path):
    out = tmp_path / "run"
    # client-level DP, z = 2, q = 1: epsilon 2.17, 3.19, 4.01 after rounds 1-3 (RDP, delta 1e-5) -> stops after 2
    res = invoke("train", "--data", tiny_synth, "--rounds", 4, "--eval-every", 3, *TINY, "--client-dp", "--clip", 0.001,
                 "--noise-multiplier", 2, "--target-epsilon", 3.5, "--out", out)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = max(r["round"] for r in records if r["scope"] == "train")
    assert trained == 2 and summary["privacy"]["stopped"]
    assert summary["evaluated_round"] == trained
    assert 0.0 <= summary["global_seen"]["rank1"] <= 1.0 and "global_unseen" in summary
    assert load_checkpoint(out / "ckpt.pt")["round"] == trained
    # resuming the stopped run evaluates nothing twice
    res = invoke("train", "--data", tiny_synth, "--rounds", 4, "--eval-every", 3, *TINY, "--client-dp", "--clip", 0.001,
                 "--noise-multiplier", 2, "--target-epsilon", 3.5, "--out", out, "--resume")
    assert res.exit_code == 0, res.output
    again = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert again == records


def test_write_atomically_replaces_whole_or_not_at_all(tmp_path):
    """The one atomic-write helper (run JSON, client memories, exports): a failing write keeps the old file."""
    from privreid.io import write_file_atomically, write_json_atomic

    path = tmp_path / "summary.json"
    write_json_atomic(path, {"b": 1, "a": [2]})
    assert path.read_text() == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}'

    def half_then_fail(tmp):
        tmp.write_text("{half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_file_atomically(path, half_then_fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    assert path.read_text().startswith('{\n  "a"')
