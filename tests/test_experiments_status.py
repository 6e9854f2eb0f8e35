"""``privreid status OUT``: every run done / running / queued / failed, its round, mAP and ETA, from the directories."""

from __future__ import annotations

import json
import os
import re
import time

from typer.testing import CliRunner

from privreid.cli import app
from privreid.experiments import status
from privreid.experiments.executor import ExecutorSettings, PlannedRun, ProgressView, execute, write_plan
from privreid.rundir import RunLock

from conftest import tiny_config


def test_status_reads_every_state_from_the_run_directories(tiny_synth, tmp_path):
    out = tmp_path / "sweep"
    runs = [PlannedRun(f"run{i}", tiny_config(tiny_synth, rounds=2, seed=i), {"i": i}, i) for i in range(4)]
    execute(runs[:1], out, ExecutorSettings(), progress=False)  # run0 done
    write_plan(out, runs, ExecutorSettings(), {"run3": "DataError: no such folder"})
    # run1: a run in progress, with its first round recorded and its lock held
    run1 = out / "run1"
    run1.mkdir()
    (run1 / "env.json").write_text("{}")
    (run1 / "metrics.jsonl").write_text(json.dumps({"round": 1, "scope": "global", "split": "seen",
                                                    "testset": "a", "mAP": 0.25}) + "\n")
    os.utime(run1 / "env.json", (time.time() - 10, time.time() - 10))
    (run1 / "log.txt").write_text("")
    lock = RunLock(run1).acquire()
    try:
        rows = status.collect(out)
    finally:
        lock.release()
    by = {r["run"]: r for r in rows}
    assert [by[n]["state"] for n in ("run0", "run1", "run2", "run3")] == ["done", "running", "queued", "failed"]
    assert (by["run0"]["round"], by["run0"]["rounds"], by["run0"]["eta_s"]) == (2, 2, 0.0)
    assert by["run1"]["round"] == 1 and by["run1"]["mAP"] == 0.25
    assert 9 < by["run1"]["s/round"] < 60 and by["run1"]["eta_s"] == by["run1"]["s/round"]
    assert by["run2"]["eta_s"] > 0 and by["run3"]["eta_s"] is None  # queued: from the runs' seconds per round
    assert status.counts(rows) == {"done": 1, "running": 1, "queued": 1, "failed": 1}
    assert not status.is_running(run1)  # released: a stopped run is no longer running

    text = CliRunner().invoke(app, ["status", str(out)]).output
    assert re.search(r"\| run1 +\| queued +\| 1/2 +\| 25.0 ", text) and re.search(r"\| run3 +\| failed ", text)
    assert "DataError: no such folder" in text and "4 runs: 1 done, 0 running, 2 queued, 1 failed; ETA" in text


def test_status_of_a_directory_without_a_plan_is_one_line(tmp_path):
    res = CliRunner().invoke(app, ["status", str(tmp_path)])
    assert res.exit_code == 2 and "holds no sweep or table" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_one_progress_view_over_all_runs(tiny_synth, tmp_path, capsys):
    runs = [PlannedRun(f"run{i}", tiny_config(tiny_synth, rounds=1, seed=i), {"i": i}, i) for i in range(2)]
    execute(runs, tmp_path, ExecutorSettings(), progress=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("2 runs: 0 done, 0 running, 2 queued, 0 failed")
    assert lines[-1] == "2 runs: 2 done, 0 running, 0 queued, 0 failed"
    assert all(line.startswith("2 runs: ") for line in lines)  # one view, no per-run bars
    assert ProgressView(tmp_path, 1).tty is False
