"""``privreid data synth`` never loses data: it replaces only a dataset it wrote, never one a run is using,
and a generation that is stopped (SIGTERM) or killed leaves no half-written folder behind (issue 26)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from badinput import REPO, BadInput, check_refused, tree_digest
from privreid.data.synthetic import SynthConfig, generate_synthetic
from privreid.data.synthetic_cache import DATASET_MARKER, is_generated_dataset
from privreid.rundir import RunLock

ONE_DOMAIN = dict(num_domains=1, ids_per_domain=3, test_ids_per_domain=2, cams_per_domain=2,
                  images_per_id_per_cam=1, height=32, width=16, distractors=0, junk=0)
TINY = ("--domains", "1", "--height", "32", "--width", "16")


def _thesis(tmp: Path) -> None:
    (tmp / "thesis").mkdir()
    (tmp / "thesis" / "thesis.tex").write_text("\\documentclass{article}\n")


def _generated(tmp: Path) -> Path:
    return generate_synthetic(tmp / "data", SynthConfig(**ONE_DOMAIN))


def _locked_dataset(tmp: Path) -> None:
    """A generated dataset that a live run holds the lock of (this process, through another descriptor)."""
    _generated(tmp)
    _locked_dataset.lock = RunLock(tmp / "data").acquire()


CASES = [
    BadInput("foreign-overwrite", ("data", "synth", "--out", "{tmp}/thesis", *TINY, "--overwrite"),
             keep=("thesis",), setup=_thesis, says="not a dataset privreid generated"),
    BadInput("foreign-nonempty", ("data", "synth", "--out", "{tmp}/thesis", *TINY),
             keep=("thesis",), setup=_thesis, says="never replaced"),
    BadInput("dataset-in-use-by-a-run", ("data", "synth", "--out", "{tmp}/data", *TINY, "--overwrite"),
             keep=("data",), setup=_locked_dataset, says="in use by another privreid run"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused(case, tmp_path):
    try:
        check_refused(case, tmp_path)
    finally:
        lock = getattr(_locked_dataset, "lock", None)
        if lock is not None:
            lock.release()
            _locked_dataset.lock = None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in tmp_path.iterdir()
                                                               if not p.name.startswith("."))


def test_overwrite_replaces_a_generated_dataset_and_marks_it(tmp_path):
    out = _generated(tmp_path)
    assert (out / DATASET_MARKER).is_file() and is_generated_dataset(out)
    listed = json.loads((out / DATASET_MARKER).read_text())["files"]
    assert sorted(listed) == sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                                    if p.is_file() and p.name != DATASET_MARKER)
    before = tree_digest(out)
    generate_synthetic(out, SynthConfig(**ONE_DOMAIN), overwrite=True)
    assert tree_digest(out) == before  # the same files, rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def _with_notes(where: str):
    """A generated dataset in which the user put a file of their own (issue 39: --overwrite deleted it)."""
    def setup(tmp: Path) -> None:
        _generated(tmp)
        (tmp / "data" / where).write_text("mine\n")
    return setup


def _linked_out(tmp: Path) -> None:
    _generated(tmp)
    (tmp / "link").symlink_to(tmp / "data")


OVERWRITE_CASES = [
    BadInput("notes-beside-the-domains", ("data", "synth", "--out", "{tmp}/data", *TINY, "--overwrite"),
             keep=("data",), setup=_with_notes("MY_NOTES.txt"), says="MY_NOTES.txt, which privreid did not write"),
    BadInput("a-file-among-the-images", ("data", "synth", "--out", "{tmp}/data", *TINY, "--overwrite"),
             keep=("data",), setup=_with_notes("synthA/query/mine.jpg"), says="mine.jpg, which privreid did not write"),
    BadInput("out-a-symlink", ("data", "synth", "--out", "{tmp}/link", *TINY, "--overwrite"),
             keep=("data", "link"), setup=_linked_out, says="is a symbolic link"),
]


@pytest.mark.parametrize("case", OVERWRITE_CASES, ids=str)
def test_overwrite_deletes_only_what_the_dataset_lists(case, tmp_path):
    check_refused(case, tmp_path)


def test_older_datasets_without_the_marker_are_recognised_by_their_exact_layout(tmp_path):
    out = _generated(tmp_path)
    (out / DATASET_MARKER).unlink()  # as written before the marker existed
    assert is_generated_dataset(out)
    (out / "notes.txt").write_text("mine")  # anything beside the manifest's domains: not ours to delete
    assert not is_generated_dataset(out)
    (out / "notes.txt").unlink()
    (out / "manifest.json").write_text('{"format": "something-else", "domains": ["synthA"]}')
    assert not is_generated_dataset(out)


def test_killed_generations_leave_nothing_after_the_next_run(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    abandoned = tmp_path / f".data.tmp-{pid}-x1y2"  # what a SIGKILL during the generation leaves
    (abandoned / "synthA" / "query").mkdir(parents=True)
    (abandoned / "synthA" / "query" / "0001_c1s1_000000_00.jpg").write_bytes(b"half")
    mine = tmp_path / f".data.tmp-{os.getpid()}-live"  # a live process's generation is left alone
    mine.mkdir()
    _generated(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data", mine.name])


@pytest.mark.slow
def test_sigterm_during_generation_leaves_no_dataset_and_no_temporary_folder(tmp_path):
    out = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "privreid", "data", "synth", "--out", str(out), "--domains", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    while not any(p.name.startswith(".data.tmp-") and any(p.rglob("*.jpg")) for p in tmp_path.iterdir()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [
        "error: stopped by SIGTERM; nothing was written"]
    assert "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []
    assert tree_digest(out) is None
