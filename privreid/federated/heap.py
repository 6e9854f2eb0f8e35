"""Give the process's freed heap memory back to the operating system between clients (glibc only).

Why.  Measured on DPPT (``benchmarks/memory.py``, 27 clients): the
memory the process *uses* grows by about 0.1 MiB per client (the class
centres the server keeps until the round's end, metric records), but its
resident set grew by about 7 MiB per client.  The difference is memory that
glibc's ``malloc`` holds free inside its heap: a client's training allocates
and frees tens of MiB per step (gradients, optimiser buffers, the upload's
copies, the float64 fold), glibc's adaptive ``mmap`` threshold soon serves
such blocks from the heap (it grew in steps of 9 and 18 MiB, the size of a
ResNet-18 ``layer4`` kernel and of its float64 copy), and small
blocks that outlive a client (the centres) split the freed space, so the
heap grows by 9 or 18 MiB every few clients while less than 0.3 MiB of it
is in use (``mallinfo2``: in use 283 -> 286 MiB, free 24 -> 138 MiB over
27 clients).  :func:`release_freed_memory` (``malloc_trim(0)``) returns
the free pages of the heap to the system; the engine calls it after each
client.  It changes no value, only which pages stay resident, so runs are
bit-identical (checked: fixed-seed DPPT and FedPav runs); its time cost
has not been benchmarked.  On a C library
other than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or ``None`` where the C library has none (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> bool:
    """Return the free pages of the ``malloc`` heap to the operating system; whether the C library could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
