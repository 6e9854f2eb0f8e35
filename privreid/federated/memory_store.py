"""Client memories on disk: the server's RAM stays flat in the number of clients.

A client's memory (``ClientContext.memory``: its DP accountant, MOON's
previous model, and, for methods with ``keeps_trained_model``, one copy of
its trained shared keys) lives between rounds.  Held in RAM for every
client, it grows the process by up to one model per client (45 MiB for
ResNet-18).  :class:`ClientMemories` keeps each one in a file under the run
directory (``client_memory/``) instead and loads it when it is used: at most
:data:`RESIDENT` memories are in RAM at once; using another one writes the
least recently used back (only if it changed) and drops it.

Files.  A memory changed in round ``r`` is written to
``client_memory/<client>.r<r>.pt`` (a new name each round the memory
changes), so the checkpoint of round ``r - 1`` keeps pointing at intact files
while round ``r`` runs; the checkpoint names its files
(``client_memory_files``), :func:`privreid.checkpoint.load_checkpoint` reads
them back into ``client_memory``, and files no checkpoint names any more are
deleted once the next checkpoint is written (:meth:`ClientMemories.prune`).
Values round-trip exactly (``torch.save`` / ``torch.load``), so results and
``--resume`` are bit-identical to memories held in RAM.  Files are mapped,
not read, when loaded (:func:`load_memory_file`), so entries a round
replaces without using are never read back.  Files are written without the
zip format's CRC-32 of each record (:func:`save_memory_file`): ``torch.load``
never checks it, and computing it cost over a third of each write (12 of 28
ms for a ResNet-18's 45 MiB).

Changes are detected through the mapping interface (setting or deleting an
entry); the engine also marks a memory changed after the client's local
update, which may change entries in place.  Setting entries does not load
the memory: they are kept apart until an entry is read (then the file is
loaded under them) or the memory is written; a write that replaces every
entry of the file (FedPav's trained copy, every round) never loads it.  A
FedPav round at 64x32 spent about 8 ms per client loading a memory only to
replace all of it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import torch

#: the folder under the run directory that holds the client memories
MEMORY_DIR = "client_memory"
#: how many client memories are loaded at once
RESIDENT = 1


def load_memory_file(path: Path) -> dict[str, Any]:
    """One client memory written by :class:`ClientMemories` (plain tensors and containers only).

    The tensors are mapped from the file, not read (``mmap=True``): an
    entry is read from disk only when it is used, so a memory whose entries
    are replaced (FedPav's trained copy, every round) costs no read.  The
    mapping is private: writing to a loaded tensor changes this process's
    copy, never the file, which an earlier checkpoint may still name.
    """
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def save_memory_file(data: dict[str, Any], path: Path) -> None:
    """``torch.save(data, path)`` without the CRC-32 of each record (``torch.load`` never checks it).

    The values, and what :func:`load_memory_file` returns, are those of a
    plain ``torch.save``; only the checksum fields of the zip headers are 0.
    """
    with _without_crc32():
        torch.save(data, path)


@contextlib.contextmanager
def _without_crc32():
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(before)


class ClientMemory(MutableMapping):
    """One client's memory: a dict that is loaded from its file when used and written back when changed.

    Entries set while the file is not loaded are kept in ``_data`` over the
    unread file (``_unread``): the memory is the file's entries with those
    replaced and added.  Reading any entry loads the file under them.
    """

    def __init__(self, store: "ClientMemories", name: str, data: dict | None, file: str | None):
        self._store, self.name = store, name
        self._data, self.file = data, file
        self.dirty = False
        #: whether ``_data`` holds only the entries set since the memory was dropped, over the unread ``file``
        self._unread = False
        #: the keys stored in ``file``, in order, when known (written or loaded by this process)
        self._file_keys: tuple[str, ...] | None = None

    def _loaded(self) -> dict:
        self._read_file()
        self._store._touch(self)
        return self._data

    def _read_file(self) -> None:
        """Load the file, if unread, under the entries set since (in the file's order, new entries last)."""
        if self._data is None or self._unread:
            stored = load_memory_file(self._store.directory / self.file)
            self._file_keys = tuple(stored)
            self._data = {**stored, **(self._data or {})}
            self._unread = False

    def __getitem__(self, key: str) -> Any:
        return self._loaded()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if self._data is None:  # set over the unread file
            self._data, self._unread = {}, True
        self._data[key] = value
        self.dirty = True
        self._store._touch(self)

    def __delitem__(self, key: str) -> None:
        del self._loaded()[key]
        self.dirty = True

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._loaded()))

    def __len__(self) -> int:
        return len(self._loaded())

    def __repr__(self) -> str:
        return f"ClientMemory({self.name!r}, file={self.file!r}, loaded={self._data is not None})"

    # identity, not content: a memory is one client's, and comparing contents would load it
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def mark_dirty(self) -> None:
        self.dirty = True

    def to_dict(self) -> dict:
        return dict(self._loaded())

    def spill(self, round_no: int) -> None:
        """Write the memory if it changed, then drop it from RAM (an empty, never written memory stays)."""
        if self._data is None:
            return
        if self.dirty:
            if self._unread and self._file_keys is not None and set(self._file_keys) <= self._data.keys():
                # every entry of the file replaced: no need to read it (same order as reading it would give)
                self._data = {**{k: self._data[k] for k in self._file_keys}, **self._data}
                self._unread = False
            self._read_file()  # otherwise the file's other entries are kept
            self.file = self._store.write(self.name, round_no, self._data)
            self._file_keys = tuple(self._data)
            self.dirty = False
        if self.file is not None:
            self._data = None


class ClientMemories(MutableMapping):
    """Client name -> :class:`ClientMemory`, kept in files under ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path, files: Mapping[str, str | None] | None = None):
        self.directory = Path(directory)
        self.round = 0  # the round whose changes are being written (the engine sets it)
        self._memories: dict[str, ClientMemory] = {
            name: ClientMemory(self, name, None if file else {}, file) for name, file in (files or {}).items()}
        self._resident: list[ClientMemory] = []

    # -- mapping ---------------------------------------------------------------
    def __getitem__(self, name: str) -> ClientMemory:
        return self._memories[name]

    def __setitem__(self, name: str, value: Mapping) -> None:
        memory = ClientMemory(self, name, dict(value), None)
        memory.dirty = bool(memory._data)
        self._memories[name] = memory
        self._touch(memory)

    def setdefault(self, name: str, default: Mapping = ()) -> ClientMemory:
        """``name``'s memory, created from ``default`` if it has none (the stored object, not ``default``)."""
        if name not in self._memories:
            self[name] = dict(default)
        return self._memories[name]

    def __delitem__(self, name: str) -> None:
        memory = self._memories.pop(name)
        if memory in self._resident:
            self._resident.remove(memory)

    def __iter__(self) -> Iterator[str]:
        return iter(self._memories)

    def __len__(self) -> int:
        return len(self._memories)

    # -- residence -------------------------------------------------------------
    def _touch(self, memory: ClientMemory) -> None:
        if self._resident and self._resident[-1] is memory:
            return
        if memory in self._resident:
            self._resident.remove(memory)
        self._resident.append(memory)
        while len(self._resident) > RESIDENT:
            self._resident.pop(0).spill(self.round)

    def write(self, name: str, round_no: int, data: dict) -> str:
        """Write ``data`` as ``name``'s memory of round ``round_no`` (atomically); the file's name."""
        self.directory.mkdir(parents=True, exist_ok=True)
        file = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.r{round_no}.pt"
        tmp = self.directory / f".{file}.tmp"
        save_memory_file(data, tmp)
        os.replace(tmp, self.directory / file)
        return file

    def flush(self) -> dict[str, str | None]:
        """Write every changed memory and drop them all from RAM; client name -> file (``None``: empty)."""
        while self._resident:
            self._resident.pop(0).spill(self.round)
        return {name: memory.file for name, memory in self._memories.items()}

    def prune(self, keep: Mapping[str, str | None]) -> None:
        """Delete the memory files that ``keep`` (the files the latest checkpoint names) does not name."""
        named = {f for f in keep.values() if f}
        for path in self.directory.glob("*.pt"):
            if path.name not in named:
                path.unlink(missing_ok=True)
