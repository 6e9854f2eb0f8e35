"""Output paths and run directories: checked before any work, locked while a run writes, never left empty.

Every command that writes a run directory (``train``, ``attack``, ``invert``,
``audit``, ``compare --suite``, ``sweep``, ``reproduce``) enters
:func:`open_run`, which

1. checks that the directory can be written (not a file, no file on the
   way, a writable parent; :func:`check_output_dir`) before anything is
   computed;
2. with ``lock=True`` takes an exclusive lock file (:data:`LOCK_FILE`,
   ``fcntl.flock``, holding the owner's pid): a second process on the same
   directory is refused with one line.  The kernel drops the lock when its
   process dies, so the lock file of a killed run (a dead pid) is simply
   taken over;
3. removes the temporary files (``.ckpt.pt.tmp`` ...) that a run killed
   during an atomic write left behind (only while holding the lock);
4. writes the run's provenance (:mod:`privreid.provenance`: ``config.yaml``,
   ``env.json``) and mirrors what is printed to ``log.txt``;
5. on a failure before any work was written (a refusal), puts the
   directory back as it was: the provenance files' old bytes, and no
   directory at all if it created it.

Files that are not directories (``eval --json``, ``compare --markdown``) are
checked with :func:`check_output_file`.  Every file is written atomically (:mod:`privreid.io`).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from privreid.errors import ConfigError
from privreid.io import OutputError, write_file_atomically

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
    """Refuse an output *file* path that is a directory, one of a run's own files (:func:`check_not_a_run_file`),
    or whose parent directory is missing or not writable.

    ``create_parents=True`` is for writers that create the missing parent directories themselves: the nearest
    existing ancestor must then be a writable directory.
    """
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
    """An exclusive ``flock`` on ``<dir>/.privreid.lock`` holding the owner's pid.

    The holder deletes the lock file on release, before it unlocks.  A
    process that opened the file just before may then lock the deleted file
    while another creates and locks a new one; so :meth:`acquire` holds the
    lock only once the file it locked is still the one at the path (same
    inode), and otherwise tries again.  Since only a holder deletes the file,
    at most one process holds the lock on the file the path names.
    """

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
    """Delete ``.<file>.*.tmp`` files that a killed atomic write left (call only while holding the lock)."""
    removed = []
    for tmp in Path(directory).glob(".*.tmp"):
        if tmp.is_file():
            tmp.unlink()
            removed.append(tmp)
    return removed


# --------------------------------------------------------------------------- the context of every run
@contextmanager
def open_run(out: str | os.PathLike, command: str, *, lock: bool = True, config: dict[str, Any] | None = None,
             device: str | None = None, seed: int | None = None, prepare=None, resumed: bool = False
             ) -> Iterator[Path]:
    """Check, create and (``lock``) lock ``out``, write its provenance, mirror the output to ``log.txt``.

    ``config`` is what ``config.yaml`` holds (default: the parameters of the
    running click command, :func:`privreid.provenance.command_config`);
    ``prepare(out)`` runs under the lock before anything is written (e.g.
    :func:`privreid.federated.engine.prepare_out_dir`); ``resumed`` keeps the
    earlier environments in ``env.json`` (:func:`privreid.provenance.write_provenance`) and continues
    ``log.txt`` after a separator line naming the resume (:func:`privreid.provenance.run_log`).

    A refused command leaves ``out`` as it found it: if the block fails
    before anything but the provenance changed in ``out`` (a bad argument,
    a missing checkpoint), the provenance files get their old bytes back
    (or are removed), the empty folders it made are removed, and so is
    ``out`` itself if it was created here.
    """
    from privreid import provenance

    out = check_output_dir(out)
    check_run_kind(out, command)
    check_no_links(out)
    created = not out.exists()
    run_lock, failed = None, True
    before = _RunFiles(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if lock:
            run_lock = RunLock(out).acquire()
            remove_orphaned_temporaries(out)
            before = _RunFiles(out)
        if prepare is not None:
            prepare(out)
        provenance.write_provenance(out, command, config=config, device=device, seed=seed, resumed=resumed)
        with provenance.run_log(out, resumed=resumed):
            yield out
        failed = False
    except BrokenPipeError:  # stdout's reader left: not a fault of the run directory (commands.common.run_or_exit)
        raise
    except OSError as exc:
        raise OutputError(os_error_message(exc)) from exc
    finally:
        if failed and out.is_dir() and _RunFiles(out).work == before.work:
            before.restore(out, remove_dir=created)
        if run_lock is not None:
            run_lock.release()


#: the files a training run writes besides its provenance (``--overwrite`` replaces them; no other writer may)
RUN_FILES = ("ckpt.pt", "metrics.jsonl", "summary.json")
#: the folder of a run's client memories (:data:`privreid.federated.memory_store.MEMORY_DIR`)
_MEMORY_DIR = "client_memory"


def check_no_links(out: Path) -> None:
    """Refuse, before anything is written, a run directory ``out`` in which a file privreid writes, or its
    client-memory folder, is a symbolic link (a planted ``log.txt`` link would make a resume append to a file
    outside the run): a run never writes through a link."""
    out = Path(out)
    if not out.is_dir():
        return
    link = next((p for folder in (out, out / _MEMORY_DIR) if folder.is_dir() and not folder.is_symlink()
                 for p in sorted(folder.iterdir()) if p.is_symlink()), None)
    if link is None and (out / _MEMORY_DIR).is_symlink():
        link = out / _MEMORY_DIR
    if link is not None:
        raise OutputError(f"{link} is a symbolic link; privreid never writes through a link in a run directory "
                          "(it may point outside the run): replace it with the file itself or choose another --out")


def check_not_a_run_file(path: Path, option: str = "--out", *, source: Path | None = None) -> None:
    """Refuse, in one line, an output file ``path`` that is ``source`` itself or a file a run wrote and reads back
    (its checkpoint, metrics, summary, provenance, lock or client memories): a writer such as ``export`` never
    replaces a run's own files, ``--overwrite`` or not."""
    from privreid.provenance import PROVENANCE_FILES

    path = Path(path)
    if source is not None and path.exists() and Path(source).exists() and os.path.samefile(path, source):
        raise OutputError(f"{option} {path} is the input file itself; give another file name")
    parent = path.absolute().parent
    own = {*RUN_FILES, *PROVENANCE_FILES.values(), LOCK_FILE}
    in_run = (path.name in own and run_kind(parent) is not None) or (
        parent.name == _MEMORY_DIR and run_kind(parent.parent) is not None)
    if in_run:
        run = parent if path.name in own else parent.parent
        raise OutputError(f"{option} {path} is one of the files of the run in {run}; privreid never replaces them: "
                          "give another file name")


#: files that mark a run directory written before ``env.json`` recorded its kind, by kind
_KIND_FILES = {"train": ("ckpt.pt", "metrics.jsonl"), "sweep": ("sweep.csv",)}


def run_kind(out: Path) -> str | None:
    """The command whose output ``out`` holds (``train``, ``sweep``, ``attack`` ...): the ``kind`` its
    ``env.json`` records, else (older runs) the one its files show; ``None`` for a directory that holds neither."""
    import json

    from privreid.provenance import PROVENANCE_FILES

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


class _RunFiles:
    """What a run directory holds: the bytes of its provenance files, and the size and time of every other file."""

    def __init__(self, out: Path):
        from privreid.provenance import PROVENANCE_FILES

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
