"""Writers on the command line: a full disk is one line and leaves no 0-byte file, a FIFO is written through
(never replaced), and a broken stdout pipe stops quietly (tests/badinput.py's contract)."""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from badinput import REPO, BadInput, assert_one_error_line, check_refused, full_disk, run_cli, tree_digest

TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet", "--test-domains", "synthC")


def _image_and_old_grid(tmp: Path) -> None:
    from PIL import Image

    Image.new("RGB", (16, 32), (120, 60, 30)).save(tmp / "person.png")
    (tmp / "out").mkdir()
    (tmp / "out" / "grid.png").write_bytes(b"the previous grid")


def _old_report(name: str):
    def setup(tmp: Path) -> None:
        (tmp / "out").mkdir()
        (tmp / "out" / name).write_text("the previous report\n")
    return setup


FAST = [
    BadInput("corrupt-full-disk", ("corrupt", "--image", "{tmp}/person.png", "--out", "{tmp}/out/grid.png",
                                   "--names", "fog", "--severities", "1"),
             keep=("out",), setup=_image_and_old_grid, says="disk full"),
]


@pytest.mark.parametrize("case", FAST, ids=str)
def test_full_disk_is_one_line_and_leaves_the_old_file(case, tmp_path, monkeypatch):
    check_refused(_on_full_disk(case, tmp_path, monkeypatch, "*grid.png*"), tmp_path)


def _on_full_disk(case: BadInput, tmp: Path, monkeypatch, name: str) -> BadInput:
    """``case`` set up, then every file written whose name matches ``name`` on a full disk (no progress bars:
    ``corrupt`` and ``eval`` always draw them on stderr)."""
    import tqdm

    monkeypatch.setattr(tqdm, "tqdm", functools.partial(tqdm.tqdm, disable=True))
    case.setup(tmp)
    full_disk(monkeypatch, name=name)
    return dataclasses.replace(case, setup=None)


# --------------------------------------------------------------------------- with a trained run
@pytest.fixture(scope="module")
def trained(tiny_synth, tmp_path_factory):
    """A finished one-round FedPav run."""
    out = tmp_path_factory.mktemp("writers") / "run"
    outcome = run_cli(("train", "--method", "fedpav", "--data", str(tiny_synth), *TINY, "--rounds", "1",
                       "--out", str(out)))
    assert outcome.exit_code == 0, outcome.stderr
    return out


@pytest.fixture
def run(trained, tmp_path):
    return Path(shutil.copytree(trained, tmp_path / "run"))


SLOW = [
    BadInput("eval-json-full-disk", ("eval", "--model", "{run}/ckpt.pt", "--data", "{synth}", "--domains", "synthC",
                                     "--device", "cpu", "--json", "{tmp}/out/results.json"),
             keep=("out",), setup=_old_report("results.json"), says="disk full"),
    BadInput("compare-markdown-full-disk", ("compare", "{run}/ckpt.pt", "--no-untrained", "--device", "cpu",
                                            "--markdown", "{tmp}/out/results.md"),
             keep=("out",), setup=_old_report("results.md"), says="disk full"),
    BadInput("export-state-dict-full-disk", ("export", "--model", "{run}/ckpt.pt", "--overwrite",
                                             "--out", "{tmp}/out/results.pt"),
             keep=("out",), setup=_old_report("results.pt"), says="disk full"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=str)
def test_full_disk_on_outputs_of_a_run(case, tmp_path, monkeypatch, run, tiny_synth):
    check_refused(_on_full_disk(case, tmp_path, monkeypatch, "*results.*"), tmp_path, run=run, synth=tiny_synth)


@pytest.mark.slow
def test_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_previous_checkpoint(run, tiny_synth, monkeypatch):
    before = (run / "ckpt.pt").read_bytes()
    full_disk(monkeypatch, room=4096, name=".ckpt.pt*")
    outcome = run_cli(("train", "--method", "fedpav", "--data", str(tiny_synth), *TINY, "--rounds", "2",
                       "--out", str(run), "--resume"))
    line = assert_one_error_line(outcome, says="disk full")
    assert f"the checkpoint of round 1 ({run / 'ckpt.pt'}) is intact" in line
    assert (run / "ckpt.pt").read_bytes() == before and not list(run.glob(".*.tmp"))


@pytest.mark.slow
def test_export_and_eval_json_write_through_a_fifo(run, tmp_path, tiny_synth):
    """``--out fifo`` streams to the reader (cmd > fifo); the FIFO is still a FIFO afterwards (issue 26, section 0)."""
    from test_atomic_writers import FifoReader

    reader = FifoReader(tmp_path / "model.fifo")
    outcome = run_cli(("export", "--model", str(run / "ckpt.pt"), "--overwrite", "--out", str(reader.path)))
    assert outcome.exit_code == 0, outcome.stderr
    payload = torch.load(io.BytesIO(reader.finish()), weights_only=True)
    assert stat.S_ISFIFO(reader.path.lstat().st_mode) and payload["state_dict"]

    reader = FifoReader(tmp_path / "results.fifo")
    outcome = run_cli(("eval", "--model", str(run / "ckpt.pt"), "--data", str(tiny_synth), "--domains", "synthC",
                       "--device", "cpu", "--json", str(reader.path)))
    assert outcome.exit_code == 0, outcome.stderr
    assert reader.finish().lstrip().startswith(b"[") and stat.S_ISFIFO(reader.path.lstat().st_mode)


# --------------------------------------------------------------------------- broken stdout pipe
def _closed_stdout(args: tuple[str, ...], *, lines: int) -> subprocess.CompletedProcess:
    """``privreid *args`` whose stdout reader reads ``lines`` lines, then leaves (``privreid ... | head``)."""
    proc = subprocess.Popen([sys.executable, "-m", "privreid", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    for _ in range(lines):
        proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    return subprocess.CompletedProcess(proc.args, proc.wait(), "", stderr)


def test_a_broken_stdout_pipe_exits_quietly():
    done = _closed_stdout(("methods",), lines=0)
    assert done.returncode in (0, 1) and done.stderr == "", done.stderr


@pytest.mark.slow
def test_a_broken_stdout_pipe_stops_a_run_quietly_and_resumably(trained, tmp_path, tiny_synth):
    """The reader leaves after the first line: no error line about the run directory, the lock released,
    the last checkpoint resumable."""
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    args = ("train", "--method", "fedpav", "--data", str(tiny_synth), *TINY[:-3], "--test-domains", "synthC",
            "--rounds", "3", "--out", str(run), "--resume")
    done = _closed_stdout(args, lines=1)
    assert done.returncode == 1, done.stderr
    assert "error:" not in done.stderr and "Broken pipe" not in done.stderr and "Traceback" not in done.stderr
    assert tree_digest(run).get(".privreid.lock") is None
    outcome = run_cli((*args[:-1], "--resume", "--quiet"))
    assert outcome.exit_code == 0, outcome.stderr


def test_run_or_exit_passes_a_broken_pipe_on_and_makes_other_os_errors_one_line(capsys):
    import errno

    import click

    from privreid.commands.common import run_or_exit

    def fails(exc):
        raise exc

    with pytest.raises(BrokenPipeError):  # click exits quietly with status 1
        run_or_exit(fails, BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)))
    with pytest.raises(click.exceptions.Exit) as stopped:
        run_or_exit(fails, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert stopped.value.exit_code == 2
    assert capsys.readouterr().err == "error: cannot write or read: No space left on device (disk full)\n"
