"""Give freed heap memory back to the operating system when the resident set has grown (glibc only).

Why.  Measured on DPPT (``benchmarks/memory.py``, 27 clients in one round) with glibc's ``mallinfo2``: the memory the
process *uses* grew by about 0.1 MiB per client (the class centres the server keeps until the round's end, metric
records; in use 283 -> 286 MiB), but its resident set grew by about 7 MiB per client.  The difference is memory that
``malloc`` holds free inside its heap (free 24 -> 138 MiB): a client's training allocates and frees tens of MiB per
step (gradients, optimiser buffers, the upload's copies, the float64 fold), glibc's adaptive ``mmap`` threshold soon
serves such blocks from the heap, and small blocks that outlive a client split the freed space, so the heap keeps
growing while almost none of the growth is in use.  FedPav over several rounds shows the same: 3 clients x 4 steps at
64x32, free heap 69 -> 279 MiB and resident set 1,059 -> 1,321 MiB over 9 client updates.

``malloc_trim(0)`` returns the free pages of every arena to the system.  It changes no value, only which pages stay
resident, so runs stay bit-identical.  It is not free: the pages it returns are faulted in again (zero-filled) when
the next client allocates, which after every client cost a 4-step FedPav round a measurable share of its time.
:class:`HeapTrimmer` therefore trims only when the resident set has grown by more than a slack since the last trim
(``PRIVREID_HEAP_SLACK_MB``; ``off`` never trims): memory stays within about one slack of its level after the last
trim, and a run whose memory is flat never trims.  On a C library other than glibc, or without ``/proc``, it does
nothing.

The default slack scales with the model: :data:`MODEL_COPIES` copies of its state, at least
:data:`DEFAULT_SLACK_MIB`.  A client's turn allocates and frees about that much (its optimiser's momentum, its
upload's copy, the fold's float64 temporaries), so a smaller slack trims after almost every client and the next one
faults those pages back in.  Measured with ``benchmarks/round_overhead.py`` (ResNet-18 at 64x32, 3 clients x 4 steps,
one run each): a 64 MiB slack trimmed 6 times in 21 client turns and a FedPav round took 1.049x the centralised round
on the same steps; 128 MiB, 1.028x.  ``benchmarks/memory.py`` stays flat with the default (its table in the memory
section of docs/performance.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

from privreid.environment import mib_from_env

#: the least resident-set growth (MiB) over the recorded level (:meth:`HeapTrimmer.after_client`) that triggers
#: a trim
DEFAULT_SLACK_MIB = 64
#: the default slack in copies of the model's state (see the module docstring)
MODEL_COPIES = 3
SLACK_ENV = "PRIVREID_HEAP_SLACK_MB"


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or ``None`` where the C library has none (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def resident_mib() -> float | None:
    """The process's resident set in MiB (``/proc/self/statm``), or ``None`` without ``/proc``."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def slack_from_env(model_mib: float = 0.0) -> float | None:
    """The trim slack in MiB: ``PRIVREID_HEAP_SLACK_MB`` (``off``: ``None``, never trim), by default
    :data:`MODEL_COPIES` x ``model_mib`` (the model state's size), at least :data:`DEFAULT_SLACK_MIB`."""
    return mib_from_env(SLACK_ENV, max(DEFAULT_SLACK_MIB, MODEL_COPIES * model_mib), off=True)


class HeapTrimmer:
    """Trims the ``malloc`` heap when the resident set grew by more than ``slack_mib`` over its level.

    The engine calls :meth:`after_client` after every client update; ``trims``
    counts the trims made.
    """

    def __init__(self, slack_mib: float | None = DEFAULT_SLACK_MIB):
        self.slack_mib = slack_mib
        self.level_mib: float | None = None
        self.trims = 0

    @classmethod
    def from_env(cls, model_mib: float = 0.0) -> "HeapTrimmer":
        """The trimmer with :func:`slack_from_env`'s slack for a model state of ``model_mib`` MiB."""
        return cls(slack_from_env(model_mib))

    def after_client(self) -> bool:
        """Trim if the resident set outgrew the slack over its recorded level; whether it trimmed.

        The level is the resident set after the first client, and again after
        the first client that follows each trim: the pages a trim returns that
        every client uses are faulted in again by then, so they do not count
        as growth and trigger the next trim.
        """
        trim = _malloc_trim()
        now = resident_mib() if self.slack_mib is not None and trim is not None else None
        if now is None:
            return False
        if self.level_mib is None:
            self.level_mib = now
            return False
        if now - self.level_mib <= self.slack_mib:
            return False
        trim(0)
        self.trims += 1
        self.level_mib = None
        return True
