"""Signals as exceptions: a stopped command unwinds like a failed one, so its temporary files are removed."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Signalled(BaseException):
    """A signal received inside :func:`raising_signals` (a BaseException: no ``except Exception`` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def raising_signals(*signums: int) -> Iterator[None]:
    """While the block runs, each of ``signums`` raises :class:`Signalled`; the previous handlers come back
    after it.  Outside the main thread (no signal handlers there) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Signalled(signum)

    saved = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)
