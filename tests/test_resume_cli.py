"""``privreid train --out X --resume`` alone continues a run; env.json and log.txt keep its history; a signal
leaves one line naming the kept round and the resume command (issue 26, sections 2 and 4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from badinput import REPO, run_cli

TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet", "--test-domains", "synthC")


def _train(*args):
    res = run_cli(tuple(str(a) for a in args))
    assert res.exit_code == 0, res.stderr
    return res


def test_resume_needs_no_flags_and_equals_the_uninterrupted_run(tiny_synth, tmp_path):
    flags = ("--data", tiny_synth, *TINY, "--method", "fedprox", "--lr-backbone", "0.02", "--seed", "3", "--eval-every", "1")
    _train("train", *flags, "--rounds", "2", "--out", tmp_path / "full")
    _train("train", *flags, "--rounds", "1", "--out", tmp_path / "cut")
    env_before = json.loads((tmp_path / "cut" / "env.json").read_text())
    log_before = (tmp_path / "cut" / "log.txt").read_text()

    _train("train", "--out", tmp_path / "cut", "--resume", "--rounds", "2", "--quiet")

    assert (tmp_path / "cut" / "metrics.jsonl").read_text() == (tmp_path / "full" / "metrics.jsonl").read_text()
    env = json.loads((tmp_path / "cut" / "env.json").read_text())
    assert env["previous"] == [env_before] and env["seed"] == 3
    log = (tmp_path / "cut" / "log.txt").read_text()
    assert log.startswith(log_before) and "resuming fedprox from round 1" in log[len(log_before):]
    # config.yaml still reruns the run, now with its new length
    config = (tmp_path / "cut" / "config.yaml").read_text()
    assert "method: fedprox" in config and "rounds: 2" in config and "lr-backbone: 0.02" in config


def test_resume_with_a_changed_field_names_it_with_both_values(tiny_synth, tmp_path):
    _train("train", "--data", tiny_synth, *TINY, "--rounds", "1", "--out", tmp_path / "run")
    res = run_cli(("train", "--out", str(tmp_path / "run"), "--resume", "--rounds", "2", "--lr-backbone", "0.5"))
    assert res.exit_code == 2
    assert "optim.lr_backbone 0.005 -> 0.5" in res.stderr, res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_leaves_one_line_with_the_kept_round_and_the_resume_command(signum, tiny_synth, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "privreid", "train", "--data", str(tiny_synth), *TINY,
                             "--rounds", "50", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not (out / "ckpt.pt").exists():
        time.sleep(0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    name = signal.Signals(signum).name
    kept = int(lines[0].split("the checkpoint of round ")[1].split()[0])
    assert lines[0].startswith(f"error: stopped by {name} in round {kept + 1} of 50; the checkpoint of round ") \
        and lines[0].endswith(f"continue with: privreid train --out {out} --resume"), lines[0]
    assert (out / "log.txt").read_text().splitlines()[-1].endswith(" ERROR " + lines[0].removeprefix("error: "))
    res = run_cli(("train", "--out", str(out), "--resume", "--rounds", "2"))
    assert res.exit_code == 0, res.stderr


def _interrupt_in_round(monkeypatch, round_no: int) -> None:
    """Ctrl-C in round ``round_no`` (1-based), after its work and before its checkpoint."""
    from privreid.federated.engine import FederatedEngine

    checkpoint = FederatedEngine._checkpoint

    def interrupted(engine, r):
        if r == round_no:
            raise KeyboardInterrupt
        checkpoint(engine, r)

    monkeypatch.setattr(FederatedEngine, "_checkpoint", interrupted)


def _cut(monkeypatch, out, *flags):
    """``privreid train *flags --out out`` interrupted in round 2: round 1 is checkpointed."""
    with monkeypatch.context() as m:
        _interrupt_in_round(m, 2)
        res = run_cli(("train", *map(str, flags), "--out", str(out)))
    assert res.exit_code == 130, res.stderr


def test_resume_with_no_flag_at_all_is_bit_identical_keeps_config_yaml_and_continues_the_log(tiny_synth, tmp_path, monkeypatch):
    flags = ("--data", tiny_synth, *TINY, "--rounds", "3", "--eval-every", "1", "--lr-backbone", "0.02")
    _train("train", *flags, "--out", tmp_path / "full")
    _cut(monkeypatch, tmp_path / "cut", *flags)
    config = (tmp_path / "cut" / "config.yaml").read_bytes()
    log_before = (tmp_path / "cut" / "log.txt").read_text()

    _train("train", "--out", tmp_path / "cut", "--resume")

    assert (tmp_path / "cut" / "metrics.jsonl").read_text() == (tmp_path / "full" / "metrics.jsonl").read_text()
    assert (tmp_path / "cut" / "config.yaml").read_bytes() == config  # nothing changed: the record stays
    log = (tmp_path / "cut" / "log.txt").read_text()
    assert log.startswith(log_before) and " INFO --- resumed: privreid " in log[len(log_before):].splitlines()[0]


def test_resume_may_change_the_evaluation_cadence_not_the_model(tiny_synth, tmp_path, monkeypatch):
    """--eval-every is safe to change: the resumed run trains the same model; the old way (--config) works too."""
    import torch

    from privreid.checkpoint import load_checkpoint

    flags = ("--data", tiny_synth, *TINY, "--rounds", "3")
    _train("train", *flags, "--out", tmp_path / "full")
    _cut(monkeypatch, tmp_path / "cut", *flags)

    cut = tmp_path / "cut"
    _train("train", "--config", cut / "config.yaml", "--out", cut, "--resume", "--eval-every", "1")

    full, resumed = (load_checkpoint(p / "ckpt.pt")["global_state"] for p in (tmp_path / "full", cut))
    assert full.keys() == resumed.keys() and all(torch.equal(full[k], resumed[k]) for k in full)
    evaluated = {json.loads(line)["round"] for line in (cut / "metrics.jsonl").read_text().splitlines()
                 if json.loads(line).get("scope") == "global"}
    assert evaluated == {2, 3}  # the new cadence from the resumed round on
    assert "eval-every: 1\n" in (cut / "config.yaml").read_text()


def test_a_resumed_run_loads_its_checkpoint_once(tiny_synth, tmp_path, monkeypatch):
    """``--resume`` checks the run directory and loads ``ckpt.pt`` once; the engine restores from that object."""
    import torch

    _train("train", "--data", tiny_synth, *TINY, "--rounds", "1", "--out", tmp_path / "run")
    loads, load = [], torch.load

    def counting(f, *args, **kwargs):
        loads.append(os.fspath(f) if isinstance(f, (str, os.PathLike)) else f)
        return load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    _train("train", "--out", tmp_path / "run", "--resume", "--rounds", "2")
    assert loads.count(str(tmp_path / "run" / "ckpt.pt")) == 1, loads
