"""The bad-input contract, shared by the parametrised bad-input suites (``tests/test_bad_inputs_*.py``).

Every refused command: exit status 2, exactly one ``error:`` line on stderr,
no traceback, and every byte of the directories it was pointed at unchanged
(or, for a directory that did not exist, still absent).

A case is a :class:`BadInput`: the arguments (``{tmp}`` is replaced by the
test's temporary directory, ``{synth}`` by the tiny synthetic dataset and
``{run}`` by a finished tiny run copied into ``{tmp}/run``), optional
environment variables, the directories that must not change, and ``setup``,
which prepares files in ``tmp`` before the call.  :func:`check_refused` runs
it in-process (click's runner) or, with ``subprocess=True``, as a real
``python -m privreid`` process (for what only a process shows: signals,
environment read at import, real stdio).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner


#: the checkout these tests belong to (a subprocess imports privreid from it, not from wherever it is installed)
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BadInput:
    """One bad input: ``privreid *args`` must be refused without writing anything into ``keep``."""

    id: str
    args: tuple[str, ...]
    #: directories (relative to tmp, after substitution) whose every byte must stay as it was (or stay absent)
    keep: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    #: a substring the one error line must contain (case-insensitive)
    says: str = ""
    subprocess: bool = False

    def __str__(self) -> str:  # pytest ids
        return self.id


def tree_digest(root: Path) -> dict[str, str] | None:
    """Every entry under ``root`` -> the sha256 of a regular file's bytes, its mode, or its kind; None if absent."""
    root = Path(root)
    if not root.exists() and not root.is_symlink():
        return None
    if not root.is_dir():
        return {".": _entry_digest(root)}
    return {str(p.relative_to(root)): _entry_digest(p) for p in sorted(root.rglob("*"))}


def _entry_digest(p: Path) -> str:
    st = p.lstat()
    if stat.S_ISREG(st.st_mode):
        return f"{stat.S_IMODE(st.st_mode):o}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
    return f"{stat.S_IMODE(st.st_mode):o}:{stat.S_IFMT(st.st_mode):o}"


def substitute(values: tuple[str, ...] | dict[str, str], **where: Path | str):
    """``{tmp}``, ``{synth}``, ``{run}`` ... in each value replaced by ``where``'s paths."""
    fill = lambda v: str(v).format(**{k: str(p) for k, p in where.items()})  # noqa: E731
    if isinstance(values, dict):
        return {k: fill(v) for k, v in values.items()}
    return tuple(fill(v) for v in values)


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(args: tuple[str, ...], *, env: dict[str, str] | None = None, subprocess_: bool = False,
            cwd: Path | None = None, timeout: float = 300) -> Outcome:
    """``privreid *args``, in-process (click's runner) or as a ``python -m privreid`` process."""
    if subprocess_:
        proc = subprocess.run([sys.executable, "-m", "privreid", *args], capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(env or {})}, cwd=cwd,
                              timeout=timeout)
        return Outcome(proc.returncode, proc.stdout, proc.stderr)
    from privreid.cli import app

    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        res = CliRunner().invoke(app, list(args))
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    stderr = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        import traceback

        stderr += "".join(traceback.format_exception(res.exception))
    return Outcome(res.exit_code, res.stdout, stderr)


def assert_one_error_line(outcome: Outcome, says: str = "") -> str:
    """Exit 2, one ``error:`` line on stderr, no traceback; returns the line."""
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.exit_code == 2, (outcome.exit_code, outcome.stderr, outcome.stdout[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), outcome.stderr
    assert says.lower() in lines[0].lower(), (says, lines[0])
    return lines[0]


def check_refused(case: BadInput, tmp: Path, **where: Path | str) -> str:
    """Run ``case`` in ``tmp`` and assert the whole contract; returns the error line."""
    where = {"tmp": tmp, **where}
    if case.setup is not None:
        case.setup(tmp)
    keep = [tmp / d for d in substitute(case.keep, **where)]
    before = {str(d): tree_digest(d) for d in keep}
    outcome = run_cli(substitute(case.args, **where), env=substitute(case.env, **where),
                      subprocess_=case.subprocess, cwd=tmp)
    line = assert_one_error_line(outcome, case.says)
    after = {str(d): tree_digest(d) for d in keep}
    assert after == before, f"{case.id}: a refused command changed {[d for d in before if before[d] != after[d]]}"
    return line


class _FullFile:
    """A file that takes ``room`` more bytes (or characters), then fails every write with ENOSPC (a full disk)."""

    def __init__(self, fh, room: int):
        self.fh, self.room = fh, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.fh.write(data[:self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __iter__(self):
        return iter(self.fh)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def full_disk(monkeypatch, *, room: int = 0, name: str = "*") -> None:
    """A fault-injecting disk for in-process tests: every file opened for writing whose name matches the glob
    ``name`` takes ``room`` bytes, then its writes fail with ENOSPC (``open``, ``io.open`` and ``Path.open``)."""
    import builtins
    import fnmatch
    import io

    real_open = builtins.open

    def open_full(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        writes = any(c in mode for c in "wax+")
        if writes and isinstance(file, (str, os.PathLike)) and fnmatch.fnmatch(Path(file).name, name):
            return _FullFile(fh, room)
        return fh

    monkeypatch.setattr(builtins, "open", open_full)
    monkeypatch.setattr(io, "open", open_full)


def fake_superlink(monkeypatch) -> list:
    """``flower run`` without a SuperLink: each run's :class:`~privreid.flower.server_app.ServerSettings` is recorded
    in the returned list and the run "finishes" with a one-round ``summary.json``."""
    import json

    told: list = []

    def fake_run(settings, superlink, **kwargs):
        told.append(settings)
        (settings.out_dir / "summary.json").write_text(json.dumps({"method": "fedpav", "rounds": 1}))

    monkeypatch.setattr("privreid.flower.deployment.run_on_superlink", fake_run)
    return told
