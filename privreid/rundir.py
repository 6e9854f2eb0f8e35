"""Output paths and run directories: checked before any work, locked while a run writes, never left empty.

Every command that writes a run directory enters :func:`privreid.provenance.open_run`, which

1. checks the directory can be written (:func:`check_output_dir`) before anything is computed;
2. with ``lock=True`` takes an exclusive ``fcntl.flock`` on :data:`LOCK_FILE` (a second process is refused in
   one line; the kernel drops the lock of a dead process, whose file is taken over);
3. removes the temporary files a killed atomic write left (``.ckpt.pt.privreid.tmp`` ...), under the lock, and
   no other file;
4. writes the provenance (:mod:`privreid.provenance`) and mirrors output to ``log.txt``;
5. on a refusal, puts the directory back as it was (:class:`RunFiles`).

This module holds those steps and the run's own files (:data:`RUN_FILES`, :data:`PROVENANCE_FILES`, the
client-memory files, :func:`prepare_out_dir`). Output files are checked with :func:`check_output_file`."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from pathlib import Path
from urllib.parse import quote

from privreid.errors import CheckpointError, ConfigError
from privreid.io import TEMPORARY_SUFFIX, OutputError, write_file_atomically

#: the lock file a run holds in its directory while it writes
LOCK_FILE = ".privreid.lock"


def _nearest_existing(path: Path) -> Path:
    for parent in [path, *path.parents]:
        if parent.exists() or parent.is_symlink():
            return parent
    return Path(".")


def _check_writable_dir(existing: Path, option: str, path: Path) -> None:
    if not existing.is_dir():
        raise OutputError(f"{option} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: {existing} is not writable (read-only file system or no permission)")


def check_output_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """Refuse, with one line, a directory path that cannot be created or written (checked before any work)."""
    path = Path(path)
    _check_writable_dir(_nearest_existing(path.absolute()), option, path)
    return path


def check_output_file(path: str | os.PathLike | None, option: str, *, create_parents: bool = False) -> None:
    """Refuse an output *file* path that is a directory, a run's own file (:func:`check_not_a_run_file`), or
    whose parent is missing or not writable (``create_parents``: the nearest existing ancestor must be writable)."""
    if path is None:
        return
    path = Path(path)
    check_not_a_run_file(path, option)
    if path.is_dir():
        raise OutputError(f"{option} {path} is a directory; give a file name")
    parent = path.absolute().parent
    if create_parents:
        _check_writable_dir(_nearest_existing(parent), option, path)
        return
    if not parent.is_dir():
        raise OutputError(f"{option} {path}: the directory {path.parent} does not exist")
    _check_writable_dir(parent, option, path)


def os_error_message(exc: OSError, where: str | os.PathLike | None = None) -> str:
    """An OS error as one line: what failed and on which file (no traceback)."""
    place = exc.filename or where
    what = exc.strerror or str(exc)
    hint = " (disk full)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return f"cannot write or read{f' {place}' if place else ''}: {what}{hint}"


# --------------------------------------------------------------------------- lock
class RunLock:
    """An exclusive ``flock`` on ``<dir>/.privreid.lock`` holding the owner's pid.  The holder deletes the file before
    unlocking, so :meth:`acquire` holds the lock only once the file it locked is still the one at the path (same inode),
    else retries: at most one process holds the path's lock."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> "RunLock":
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise ConfigError(f"{self.path.parent} is in use by another privreid run (pid {owner}, lock "
                                  f"{self.path}); wait for it or choose another --out") from None
            if self._names(fd):
                break
            os.close(fd)  # a released (deleted) lock file: lock the one the path names now
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def _names(self, fd: int) -> bool:
        """Whether the path still names the file open as ``fd``."""
        try:
            here = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # while locked: only the holder deletes the lock file
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def remove_orphaned_temporaries(directory: Path) -> list[Path]:
    """Delete the ``.<file>.privreid.tmp`` files that a killed atomic write left (call only while holding the lock);
    any other file, a user's ``.notes.tmp`` included, stays."""
    removed = []
    for tmp in Path(directory).glob(".*" + TEMPORARY_SUFFIX):
        if tmp.is_file():
            tmp.unlink()
            removed.append(tmp)
    return removed


#: the files a training run writes besides its provenance (``--overwrite`` replaces them; no other writer may)
RUN_FILES = ("ckpt.pt", "metrics.jsonl", "summary.json")
#: a run's provenance files (:mod:`privreid.provenance`), by role
PROVENANCE_FILES = {"config": "config.yaml", "environment": "env.json", "log": "log.txt"}


# --------------------------------------------------------------------------- client-memory files
#: the folder under the run directory that holds the client memories
MEMORY_DIR = "client_memory"


def memory_file_name(client: str, round_no: int) -> str:
    """``<client>.r<round>.pt``: ``client``'s memory changed in ``round_no``. The name is percent-encoded
    (:func:`urllib.parse.quote`, keeping only ``A-Za-z0-9_.-~``), which is injective and never leaves the folder."""
    return f"{quote(client, safe='')}.r{round_no}.pt"


#: the names privreid writes in ``client_memory/``: :func:`memory_file_name`'s, and their temporary siblings
MEMORY_FILE_NAMES = re.compile(r"[A-Za-z0-9_.~%-]+\.r[0-9]+\.pt|\.[A-Za-z0-9_.~%-]+\.r[0-9]+\.pt\.privreid\.tmp")


def is_memory_file_of(file: str, client: str, up_to_round: int) -> bool:
    """Whether ``file`` is :func:`memory_file_name`'s name for ``client`` in a round ``1..up_to_round``."""
    stem, sep, rest = file.rpartition(".r")
    number = rest.removesuffix(".pt")
    return (bool(sep) and stem == quote(client, safe="") and rest.endswith(".pt") and number.isascii()
            and number.isdigit() and 1 <= int(number) <= up_to_round)


def own_memory_files(directory: Path) -> list[Path]:
    """The files of the client-memory folder ``directory`` that privreid wrote (``--overwrite`` deletes them);
    :class:`~privreid.errors.ConfigError` naming the first entry it did not write, so nothing else is ever deleted."""
    directory = Path(directory)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise ConfigError(f"{directory} is not the folder privreid writes client memories to (a link or a file); "
                          "nothing was deleted: move it out first")
    if not directory.is_dir():
        return []
    own = []
    for path in sorted(directory.iterdir()):
        if path.is_symlink() or not path.is_file() or not MEMORY_FILE_NAMES.fullmatch(path.name):
            raise ConfigError(f"{directory} holds {path.name}, which privreid did not write; --overwrite deletes "
                              "only the run's own files: move it out first")
        own.append(path)
    return own


def memory_file_path(directory: Path, file: object) -> Path:
    """``directory / file`` for a file name read from a checkpoint; :class:`CheckpointError` unless it is a plain
    file name that stays inside ``directory`` once symlinks and ``..`` are resolved."""
    directory = Path(directory)
    if not isinstance(file, str) or not file:
        raise CheckpointError(f"the checkpoint names a client-memory file {file!r}, which is not a file name")
    path = directory / file
    if not path.resolve().is_relative_to(directory.resolve()) or path.resolve() == directory.resolve():
        raise CheckpointError(f"refusing to read client-memory file {file!r}: it lies outside {directory} "
                              "(a checkpoint names only files of its own run)")
    return path


def prepare_out_dir(out_dir: Path, *, overwrite: bool, resume: bool) -> None:
    """Refuse to clobber an existing run unless asked to overwrite or resume; the two refusals agree.

    A run killed before its first checkpoint (``metrics.jsonl``, no ``ckpt.pt``) resumes from round 0, and the
    refusal says so. ``overwrite`` deletes only :data:`RUN_FILES` and the client-memory files
    (:func:`own_memory_files`), refusing anything else in ``client_memory/``."""
    existing = [f for f in RUN_FILES if (out_dir / f).exists() or (out_dir / f).is_symlink()]
    has_ckpt = (out_dir / "ckpt.pt").exists()
    if resume:
        if not has_ckpt:
            raise ConfigError(f"--resume: {out_dir} holds a run that stopped before its first checkpoint "
                              f"({', '.join(existing)}); start it again with --overwrite" if existing else
                              f"--resume: no checkpoint at {out_dir / 'ckpt.pt'}")
        return
    if existing and not overwrite:
        hint = ("pass --overwrite to replace it or --resume to continue it" if has_ckpt else
                "it stopped before its first checkpoint; pass --resume to start it from round 0 (nothing was "
                "done yet) or --overwrite")
        raise ConfigError(f"{out_dir} already holds a run ({', '.join(existing)}); {hint}")
    memories = own_memory_files(out_dir / MEMORY_DIR) if overwrite else []
    for f in existing:
        (out_dir / f).unlink()
    for path in memories:
        path.unlink()
    if memories and not any((out_dir / MEMORY_DIR).iterdir()):
        (out_dir / MEMORY_DIR).rmdir()


def check_no_links(out: Path) -> None:
    """Refuse, before anything is written, a run directory ``out`` in which a file privreid writes, or its
    client-memory folder, is a symbolic link (a planted ``log.txt`` link would make a resume append to a file
    outside the run): a run never writes through a link."""
    out = Path(out)
    if not out.is_dir():
        return
    link = next((p for folder in (out, out / MEMORY_DIR) if folder.is_dir() and not folder.is_symlink()
                 for p in sorted(folder.iterdir()) if p.is_symlink()), None)
    if link is None and (out / MEMORY_DIR).is_symlink():
        link = out / MEMORY_DIR
    if link is not None:
        raise OutputError(f"{link} is a symbolic link; privreid never writes through a link in a run directory "
                          "(it may point outside the run): replace it with the file itself or choose another --out")


def check_not_a_run_file(path: Path, option: str = "--out", *, source: Path | None = None) -> None:
    """Refuse, in one line, an output file ``path`` that is ``source`` itself or a file a run wrote and reads back
    (its checkpoint, metrics, summary, provenance, lock or client memories): a writer such as ``export`` never
    replaces a run's own files, ``--overwrite`` or not."""
    path = Path(path)
    if source is not None and path.exists() and Path(source).exists() and os.path.samefile(path, source):
        raise OutputError(f"{option} {path} is the input file itself; give another file name")
    parent = path.absolute().parent
    own = {*RUN_FILES, *PROVENANCE_FILES.values(), LOCK_FILE}
    in_run = (path.name in own and run_kind(parent) is not None) or (
        parent.name == MEMORY_DIR and run_kind(parent.parent) is not None)
    if in_run:
        run = parent if path.name in own else parent.parent
        raise OutputError(f"{option} {path} is one of the files of the run in {run}; privreid never replaces them: "
                          "give another file name")


#: files that mark a run directory written before ``env.json`` recorded its kind, by kind
_KIND_FILES = {"train": ("ckpt.pt", "metrics.jsonl"), "sweep": ("sweep.csv",)}


def run_kind(out: Path) -> str | None:
    """The command whose output ``out`` holds (``train``, ``sweep``, ``attack`` ...): the ``kind`` its
    ``env.json`` records, else (older runs) the one its files show; ``None`` for a directory that holds neither."""
    env = Path(out) / PROVENANCE_FILES["environment"]
    try:
        kind = json.loads(env.read_text()).get("kind") if env.is_file() else None
    except (ValueError, UnicodeDecodeError, AttributeError, OSError):
        kind = None
    if isinstance(kind, str):
        return kind
    return next((k for k, files in _KIND_FILES.items() if any((Path(out) / f).exists() for f in files)), None)


def check_run_kind(out: Path, command: str) -> None:
    """Refuse, before anything is written, an ``out`` that holds another command's output (a ``train`` run given
    to ``sweep``, a sweep given to ``train`` ...): its files would be rewritten or mixed with this one's."""
    kind = run_kind(out) if Path(out).is_dir() else None
    if kind is not None and kind != command:
        raise ConfigError(f"{out} holds the output of `privreid {kind}`, not of `privreid {command}`; nothing was "
                          "written: choose another --out")


class RunFiles:
    """What a run directory holds: the bytes of its provenance files, and the size and time of every other file."""

    def __init__(self, out: Path):
        self.provenance = {name: _read_or_none(out / name) for name in PROVENANCE_FILES.values()}
        self.folders: set[Path] = set()
        self.work: dict[str, tuple[int, int]] = {}
        if not out.is_dir():
            return
        for p in out.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                self.folders.add(p)
            elif p.parent != out or p.name not in {*self.provenance, LOCK_FILE}:
                st = p.lstat()
                self.work[str(p.relative_to(out))] = (st.st_size, st.st_mtime_ns)

    def restore(self, out: Path, *, remove_dir: bool) -> None:
        """Put the provenance files back as they were and remove the folders made since (``out`` too if asked)."""
        for name, data in self.provenance.items():
            if data is None:
                (out / name).unlink(missing_ok=True)
            elif _read_or_none(out / name) != data:
                write_file_atomically(out / name, lambda tmp, data=data: tmp.write_bytes(data))
        for folder in sorted({p for p in out.rglob("*") if p.is_dir()} - self.folders,
                             key=lambda p: len(p.parts), reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()
        if remove_dir and not any(p.name != LOCK_FILE for p in out.iterdir()):
            (out / LOCK_FILE).unlink(missing_ok=True)
            out.rmdir()


def _read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None
