"""The run lock (privreid.rundir.RunLock) is exclusive: processes racing for it never hold it together."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from privreid.errors import ConfigError
from privreid.rundir import LOCK_FILE, RunLock

PROCESSES, ACQUISITIONS = 4, 200


def _hammer(directory: str, start, collisions) -> None:
    """After ``start``, take and release the lock ``ACQUISITIONS`` times; inside, claim an O_EXCL marker.

    Failing to create the marker means another process holds the lock too: counted in ``collisions``.
    """
    marker = Path(directory) / "holder"
    start.wait()
    taken = 0
    while taken < ACQUISITIONS:
        try:
            lock = RunLock(Path(directory)).acquire()
        except ConfigError:  # held by another process: try again
            continue
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            with collisions.get_lock():
                collisions.value += 1
        else:
            os.close(fd)
            os.unlink(marker)
        lock.release()
        taken += 1


def test_racing_processes_never_hold_the_lock_together(tmp_path):
    context = multiprocessing.get_context("fork")
    start, collisions = context.Barrier(PROCESSES), context.Value("i", 0)
    workers = [context.Process(target=_hammer, args=(str(tmp_path), start, collisions)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [w.exitcode for w in workers] == [0] * PROCESSES
    assert collisions.value == 0
    assert not (tmp_path / LOCK_FILE).exists() and list(tmp_path.iterdir()) == []


def test_a_held_lock_refuses_a_second_holder_and_is_free_after_release(tmp_path):
    held = RunLock(tmp_path).acquire()
    try:
        RunLock(tmp_path).acquire()
    except ConfigError as exc:
        assert f"pid {os.getpid()}" in str(exc)
    else:
        raise AssertionError("a second holder got the lock")
    held.release()
    RunLock(tmp_path).acquire().release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_file_deleted_under_an_opener_is_not_held(tmp_path):
    """A process that opened the lock file just before its holder released (deleted) it must not hold it."""
    first = RunLock(tmp_path).acquire()
    stale = os.open(tmp_path / LOCK_FILE, os.O_RDWR)  # what a racing acquire() had opened
    first.release()
    second = RunLock(tmp_path).acquire()  # a new lock file
    try:
        import fcntl

        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the deleted file locks: the inode check must refuse it
        assert not RunLock(tmp_path)._names(stale)
        assert second._names(second.fd)
    finally:
        os.close(stale)
        second.release()
