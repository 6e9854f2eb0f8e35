"""The executor: resumable (also after kill -9 of the driver), failures retried then marked, Ray = local bits."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import privreid.training
from privreid.errors import ConfigError
from privreid.experiments.executor import ExecutorSettings, PlannedRun, _trial, execute
from privreid.experiments.sweep import parse_grid, plan_sweep

from conftest import tiny_config


def _runs(root, n: int, rounds: int = 1) -> list[PlannedRun]:
    return [PlannedRun(f"run{i}", tiny_config(root, rounds=rounds, seed=i), {"i": i}, i) for i in range(n)]


def _count_training(monkeypatch) -> list[str]:
    trained, real = [], privreid.training.train_run

    def counting(config, out, **kw):
        trained.append(Path(out).name)
        return real(config, out, **kw)

    monkeypatch.setattr(privreid.training, "train_run", counting)
    return trained


def test_settings_and_runs_are_refused_in_one_line(tiny_synth, tmp_path):
    runs = _runs(tiny_synth, 1)
    for settings, message in ((ExecutorSettings(kind="dask"), "choose local or ray"),
                              (ExecutorSettings(cpus_per_run=0), "--cpus-per-run"),
                              (ExecutorSettings(kind="ray", max_concurrent=0), "--max-concurrent"),
                              (ExecutorSettings(retries=-1), "--retries")):
        with pytest.raises(ConfigError, match=message):
            execute(runs, tmp_path / "x", settings)
    with pytest.raises(ConfigError, match="two runs are named"):
        execute(runs + runs, tmp_path / "x", ExecutorSettings())
    with pytest.raises(ConfigError, match="not a plain directory name"):
        execute([dataclasses.replace(runs[0], name="../up")], tmp_path / "x", ExecutorSettings())
    assert not (tmp_path / "x").exists()


def test_a_failing_run_is_retried_then_marked_and_the_others_go_on(tiny_synth, tmp_path, monkeypatch):
    runs = _runs(tiny_synth, 3)
    bad = dataclasses.replace(runs[1].config, data=dataclasses.replace(runs[1].config.data,
                                                                       roots=[str(tmp_path / "no-data")]))
    runs[1] = dataclasses.replace(runs[1], config=bad)
    trained = _count_training(monkeypatch)
    outcomes = execute(runs, tmp_path / "out", ExecutorSettings(retries=1), progress=False)
    assert [o.status for o in outcomes] == ["done", "failed", "done"]
    assert trained == ["run0", "run1", "run1", "run2"]  # one retry, then marked failed
    error = outcomes[1].error
    assert error and "\n" not in error and "no-data" in error
    plan = json.loads((tmp_path / "out" / "runs.json").read_text())
    assert plan["failed"] == {"run1": error}

    # a flaky run: fails once, done on its retry (from where it stopped)
    real, calls = privreid.training.train_run, []

    def flaky(config, out, **kw):
        calls.append(Path(out).name)
        if len(calls) == 1:
            raise RuntimeError("CUDA error: an illegal memory access\nmore lines")
        return real(config, out, **kw)

    monkeypatch.setattr(privreid.training, "train_run", flaky)
    again = execute(_runs(tiny_synth, 4)[3:], tmp_path / "flaky", ExecutorSettings(retries=1), progress=False)
    assert calls == ["run3", "run3"] and again[0].status == "done"
    none = execute(_runs(tiny_synth, 4)[3:], tmp_path / "flaky0", ExecutorSettings(retries=0), progress=False)
    assert none[0].status == "done"  # calls[0] was the only failure
    monkeypatch.setattr(privreid.training, "train_run", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad\nx")))
    failed = execute(_runs(tiny_synth, 1), tmp_path / "fail0", ExecutorSettings(retries=0), progress=False)
    assert (failed[0].status, failed[0].error) == ("failed", "ValueError: bad")


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import torch
    from pathlib import Path
    from conftest import tiny_config
    from privreid.experiments.executor import ExecutorSettings, PlannedRun, execute

    runs = [PlannedRun(f"run{{i}}", tiny_config(Path({root!r}), rounds=3, seed=i), {{"i": i}}, i) for i in range(3)]
    execute(runs, Path({out!r}), ExecutorSettings(), progress=False)
""")


def test_a_driver_killed_with_kill_9_is_continued_by_rerunning(tiny_synth, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(Path(__file__).parent), root=str(tiny_synth), out=str(out)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    deadline = time.time() + 180
    while not ((out / "run0" / "summary.json").is_file() and (out / "run1" / "ckpt.pt").is_file()):
        assert driver.poll() is None, driver.stderr.read().decode()
        assert time.time() < deadline, "the driver did not get to its second run"
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)  # mid-sweep: run0 finished, run1 in progress, run2 not started
    driver.wait()
    assert not (out / "run1" / "summary.json").is_file()
    finished = (out / "run0" / "summary.json").read_bytes()

    trained = _count_training(monkeypatch)
    outcomes = execute([PlannedRun(f"run{i}", tiny_config(tiny_synth, rounds=3, seed=i), {"i": i}, i)
                        for i in range(3)], out, ExecutorSettings(), progress=False)
    assert [o.status for o in outcomes] == ["done"] * 3
    assert [o.skipped for o in outcomes] == [True, False, False]
    assert "run0" not in trained and (out / "run0" / "summary.json").read_bytes() == finished
    assert "resumed" in (out / "run1" / "log.txt").read_text()  # from its checkpoint, not from scratch


def test_a_worker_that_cannot_see_out_says_so(tiny_synth, tmp_path):
    result = _trial({"run": "run0"}, runs={"run0": _runs(tiny_synth, 1)[0]}, out=str(tmp_path / "elsewhere"),
                    cwd=str(tmp_path), retries=0, threads=1)
    assert result["outcome"] == "unreachable" and result["host"]


@pytest.mark.slow
def test_ray_gives_the_bits_of_local(tiny_synth, tmp_path):
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.tune")
    runs = plan_sweep(tiny_config(tiny_synth, rounds=1), [parse_grid("privacy.beta=0,0.1")], [0, 1, 2])
    local = execute(runs, tmp_path / "local", ExecutorSettings(), progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = execute(runs, tmp_path / "ray", ExecutorSettings("ray", max_concurrent=2), progress=False)
    finally:
        ray.shutdown()
    assert [o.status for o in remote] == ["done"] * 6
    for a, b in zip(local, remote):
        for block in ("global_seen", "global_unseen", "local_seen"):
            assert a.summary[block] == b.summary[block], (a.run.name, block)
