"""Nothing deleted that privreid did not write, no run directory taken for another kind (issue 39).

A refused command: one ``error:`` line, exit 2, every byte of the directories it was pointed at unchanged
(tests/badinput.py).  Then what must work: ``train --resume`` of a run that stopped before its first checkpoint
starts it from round 0 with its recorded configuration.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from badinput import BadInput, check_refused, run_cli, substitute
from conftest import TINY_TRAIN
from privreid.checkpoint import load_checkpoint
from privreid.rundir import MEMORY_DIR

TRAIN = ("train", "--data", "{synth}", "--test-domains", "synthC", "--method", "fedpav", "--rounds", "2",
         *TINY_TRAIN)
RESUME = ("train", "--out", "{run}", "--resume", "--quiet")


def _kind(name: str, kind: str | None = None, files: tuple[str, ...] = ()):
    """A directory holding another command's output: its env.json's kind, or (older runs) its files."""
    def setup(tmp: Path) -> None:
        (tmp / name).mkdir()
        if kind:
            (tmp / name / "env.json").write_text(json.dumps({"kind": kind, "seed": 0}) + "\n")
        for f in files:
            (tmp / name / f).write_text("x\n")
    return setup


def _delete(*names: str):
    def setup(tmp: Path) -> None:
        for name in names:
            (tmp / "run" / name).unlink()
    return setup


def _empty_config(tmp: Path) -> None:
    (tmp / "run" / "config.yaml").write_text("")


def _notes_in(folder: str):
    def setup(tmp: Path) -> None:
        (tmp / "run" / folder / "MY_NOTES.txt").write_text("mine\n")
    return setup


def _link(name: str):
    """The run's ``name`` replaced by a symbolic link to a file outside the run."""
    def setup(tmp: Path) -> None:
        (tmp / "outside").mkdir()
        (tmp / "outside" / "elsewhere.txt").write_text("not the run's\n")
        (tmp / "run" / name).unlink()
        (tmp / "run" / name).symlink_to(tmp / "outside" / "elsewhere.txt")
    return setup


EXPORT = ("export", "--model", "{run}/ckpt.pt", "--overwrite", "--out")

CASES = [
    # item 5: never a link out of a run; export never replaces a run's own files
    *[BadInput(f"resume-{name}-a-symlink", RESUME, keep=("run", "outside"), setup=_link(name),
               says=f"{name} is a symbolic link") for name in ("log.txt", "metrics.jsonl", "env.json")],
    BadInput("overwrite-log-a-symlink", (*TRAIN, "--out", "{run}", "--overwrite"), keep=("run", "outside"),
             setup=_link("log.txt"), says="log.txt is a symbolic link"),
    BadInput("export-onto-its-own-checkpoint", (*EXPORT, "{run}/ckpt.pt"), keep=("run",),
             says="is the input file itself"),
    BadInput("export-onto-the-runs-config", (*EXPORT, "{run}/config.yaml"), keep=("run",),
             says="is one of the files of the run"),
    BadInput("eval-json-onto-the-runs-summary", ("eval", "--model", "{run}/ckpt.pt", "--json", "{run}/summary.json"),
             keep=("run",), says="is one of the files of the run"),
    BadInput("compare-markdown-onto-the-runs-metrics", ("compare", "{run}/ckpt.pt", "--markdown",
                                                        "{run}/metrics.jsonl"), keep=("run",),
             says="is one of the files of the run"),
    BadInput("export-onto-a-memory-file", (*EXPORT, "{run}/client_memory/synthA.r2.pt"), keep=("run",),
             says="is one of the files of the run"),

    # item 3: run directories know their kind
    BadInput("sweep-into-a-train-run", ("sweep", "--param", "beta", "--values", "0.1", "--out", "{run}",
                                        "--data", "{synth}", *TINY_TRAIN), keep=("run",),
             says="holds the output of `privreid train`, not of `privreid sweep`"),
    BadInput("attack-into-a-train-run", ("attack", "--model", "{run}/ckpt.pt", "--out", "{run}", "--device",
                                         "cpu"), keep=("run",), says="holds the output of `privreid train`"),
    BadInput("train-into-a-sweep", (*TRAIN, "--out", "{tmp}/sweep"), keep=("sweep",),
             setup=_kind("sweep", "sweep"), says="holds the output of `privreid sweep`, not of `privreid train`"),
    BadInput("train-into-an-older-sweep", (*TRAIN, "--out", "{tmp}/sweep", "--overwrite"), keep=("sweep",),
             setup=_kind("sweep", files=("sweep.csv",)), says="holds the output of `privreid sweep`"),
    BadInput("train-into-an-audit", (*TRAIN, "--out", "{tmp}/audit", "--overwrite"), keep=("audit",),
             setup=_kind("audit", "audit"), says="holds the output of `privreid audit`"),
    # item 4: --overwrite deletes only what the run wrote
    BadInput("overwrite-with-notes-in-client-memory", (*TRAIN, "--out", "{run}", "--overwrite"), keep=("run",),
             setup=_notes_in(MEMORY_DIR), says="MY_NOTES.txt, which privreid did not write"),
    # item 9: messages that point the right way
    BadInput("invert-subjects-zero", ("invert", "--model", "{run}/ckpt.pt", "--subjects", "0", "--out", "{tmp}/out",
                                      "--device", "cpu"), keep=("run", "out"), says="--subjects must be >= 1 (got 0)"),
    BadInput("resume-config-yaml-deleted", RESUME, keep=("run",), setup=_delete("config.yaml"),
             says="recorded options"),
    BadInput("resume-config-yaml-empty", RESUME, keep=("run",), setup=_empty_config, says="are empty"),
    BadInput("resume-finished-run-without-its-checkpoint", RESUME, keep=("run",), setup=_delete("ckpt.pt"),
             says="holds a finished run (summary.json) whose checkpoint"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused_in_one_line(case, tmp_path, finished_run, tiny_synth):
    shutil.copytree(finished_run, tmp_path / "run")
    line = check_refused(case, tmp_path, run=tmp_path / "run", synth=tiny_synth)
    assert "--overwrite would" in line or "start it again with --overwrite" not in line


def test_resume_before_the_first_checkpoint_starts_from_round_0(tmp_path, finished_run):
    """A run killed before its first checkpoint (config.yaml and a metrics line, no ckpt.pt): ``--resume`` starts
    it from round 0 with the recorded configuration, saying so in one line, and ends where an uninterrupted run
    ends (issue 39, item 8)."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    for name in ("ckpt.pt", "summary.json"):
        (run / name).unlink()
    shutil.rmtree(run / MEMORY_DIR)
    (run / "metrics.jsonl").write_text('{"round": 1, "scope": "train"}\n')
    outcome = run_cli(("train", "--out", str(run), "--resume", "--quiet"))
    assert outcome.exit_code == 0, outcome.stderr
    said = [line for line in (outcome.stdout + outcome.stderr).splitlines() if "before its first checkpoint" in line]
    assert len(said) == 1 and "starting it from round 0 with its recorded configuration" in said[0], said
    again, before = load_checkpoint(run / "ckpt.pt"), load_checkpoint(finished_run / "ckpt.pt")
    assert again["round"] == 2 and again["config"] == before["config"]
    assert all(torch.equal(again["global_state"][k], before["global_state"][k]) for k in before["global_state"])
    assert "error" not in outcome.stderr.lower()


def test_overwrite_of_a_run_deletes_its_own_memory_files_only(tmp_path, finished_run, tiny_synth):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "notes.txt").write_text("mine\n")  # beside the run's files: never touched
    outcome = run_cli(("train", "--data", str(tiny_synth), "--test-domains", "synthC", "--method", "fedpav",
                       "--rounds", "1", *TINY_TRAIN, "--out", str(run), "--overwrite"))
    assert outcome.exit_code == 0, outcome.stderr
    assert (run / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in (run / MEMORY_DIR).iterdir()) == ["synthA.r1.pt", "synthB.r1.pt"]


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_signal_during_start_up_is_one_line(signum, tmp_path, tiny_synth, monkeypatch):
    """A signal while the data is read, before the run directory exists: one line, the shell's exit status, and
    no directory (SIGTERM used to kill the process silently, SIGINT to print nothing useful; issue 39, item 8)."""
    import os
    import signal

    import privreid.training as training

    real = training.federation_for_config

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), getattr(signal, signum))
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "federation_for_config", signalled)
    # Python's own SIGINT handler, as a process started from a terminal has it: an earlier test in the same worker
    # may have left another one (a process that inherits SIGINT ignored, like a shell's background job, keeps
    # ignoring it, as it should)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        outcome = run_cli(substitute((*TRAIN, "--out", "{tmp}/run"), synth=tiny_synth, tmp=tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous)
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert outcome.exit_code == 128 + getattr(signal, signum), outcome.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: stopped by {signum} while running"), outcome.stderr
    assert not (tmp_path / "run").exists()

