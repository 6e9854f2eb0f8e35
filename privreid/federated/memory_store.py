"""Client memories on disk: the server's RAM stays flat in the number of clients.

A client's memory (``ClientContext.memory``: its DP accountant, MOON's previous model, and, with
``keeps_trained_model``, one copy of its trained shared keys) lives between rounds.  Held in RAM for every client, it
grows the process by up to one model per client (45 MiB for ResNet-18).  :class:`ClientMemories` keeps each one in a
file under the run directory (``client_memory/``) and loads it when used: at most :data:`RESIDENT` memories are in
RAM at once; using another writes the least recently used back (only if it changed) and drops it.

Files.  A memory changed in round ``r`` is written to ``client_memory/<client>.r<r>.pt`` (:func:`memory_file_name`:
the name percent-encoded, so distinct clients never share a file; a new name each round it changes), so the
checkpoint of round ``r - 1`` keeps pointing at intact files while round ``r`` runs.  The checkpoint names its files
(``client_memory_files``), :func:`privreid.checkpoint.load_checkpoint` reads them back into ``client_memory``, and
files no checkpoint names any more are deleted once the next checkpoint is written (:meth:`ClientMemories.prune`).
Values round-trip exactly (``torch.save`` / ``torch.load``), so results and ``--resume`` are bit-identical to
memories held in RAM.  Files are mapped, not read, when loaded (:func:`load_memory_file`), so entries a round
replaces without using are never read back.

Disk use.  For methods that score a client's trained local model (``keeps_trained_model``: FedPav, FedReID) a file
holds a copy of the client's shared keys, 45 MiB for a ResNet-18, written every round the client trains.  A round's
new files sit beside the ones the last checkpoint names until its own checkpoint is committed, so a run peaks at two
files per client: about 2 x 45 MiB x 90 = 8 GB for 90 FedPav clients at ResNet-18.  ``--set
federation.client_memory=private`` (:class:`privreid.config.FederationConfig`) keeps only what training needs (FedPav without
DP then writes no memory file at all), and a client's personalised model is the global model with its local keys.

Writes run on one background thread (:meth:`ClientMemories.write`), so a memory is written while the next client
trains: a ResNet-18's 45 MiB took 16-28 ms of each FedPav client's turn at 64x32.  At most one write is in flight (a
new one first waits for the previous), so RAM holds at most :data:`RESIDENT` memories plus the one being written.
Loading a memory whose write is in flight waits for it; the engine's checkpoint waits for the last one, and a failed
write is re-raised there, so no checkpoint names an incomplete file.  Each write returns the file's sha256
(:func:`file_sha256`), and the checkpoint records the hash of every file it names (``client_memory_hashes``): a
changed, truncated or swapped file is refused wherever a checkpoint's memories are read (:mod:`privreid.checkpoint`).

Changes are detected through the mapping interface (setting or deleting an entry); the engine also marks a memory
changed after the client's local update, which may change entries in place.  Setting entries does not load the
memory: they are kept apart until an entry is read (then the file is loaded under them) or the memory is written; a
write that replaces every entry of the file (FedPav's trained copy, every round) never loads it.  A FedPav round at
64x32 spent about 8 ms per client loading a memory only to replace all of it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, MutableMapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from privreid.checkpoint import file_sha256, load_memory_file
from privreid.io import save_torch_atomic
from privreid.rundir import MEMORY_FILE_NAMES, memory_file_name, memory_file_path

#: how many client memories are loaded at once
RESIDENT = 1


def save_memory_file(data: dict[str, Any], directory: Path, file: str) -> None:
    """``torch.save(data)`` to ``directory/file`` atomically (a temporary sibling, then a rename).

    Not synced: a sync of a ResNet-18 memory outlasted the checkpoint's own write and delayed every round's commit by
    about 40 ms (64x32, 3 clients).  A crash of the process leaves every named file complete; a power loss just after
    a checkpoint can lose memory files it names, as the operating system had not written them yet.
    """
    save_torch_atomic(data, directory / file, stream=False)


def _save_and_hash(data: dict[str, Any], directory: Path, file: str) -> str | None:
    """:func:`save_memory_file`, then the file's :func:`file_sha256` (read back from the page cache), which the
    checkpoint that names it records (``None`` if no file landed: a checkpoint naming it is refused as missing)."""
    save_memory_file(data, directory, file)
    return file_sha256(directory / file) if (directory / file).is_file() else None


@functools.cache
def _writer() -> ThreadPoolExecutor:
    """The process's memory-writing thread (one for every store; the interpreter joins it at exit)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="privreid-memory")


class ClientMemory(MutableMapping):
    """One client's memory: a dict that is loaded from its file when used and written back when changed.

    Entries set while the file is not loaded are kept in ``_data`` over the unread file (``_unread``): the memory is
    the file's entries with those replaced and added.  Reading any entry loads the file under them.
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
            self._store.wait(self.file)
            stored = load_memory_file(memory_file_path(self._store.directory, self.file))
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
            # an empty memory needs no file (``client_memory=private`` FedPav keeps nothing)
            self.file = self._store.write(self.name, round_no, self._data) if self._data else None
            self._file_keys = tuple(self._data)
            self.dirty = False
        if self.file is not None:
            self._data = None


class ClientMemories(MutableMapping):
    """Client name -> :class:`ClientMemory`, kept in files under ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path, files: Mapping[str, str | None] | None = None,
                 hashes: Mapping[str, str] | None = None):
        self.directory = Path(directory)
        #: file name -> its :func:`file_sha256`, for every file this store wrote, adopted or was given
        #: (``hashes``: client name -> hash, as a checkpoint records them)
        self.hashes: dict[str, str] = {file: hashes[name] for name, file in (files or {}).items()
                                       if file and name in (hashes or {})}
        self.round = 0  # the round whose changes are being written (the engine sets it)
        self._memories: dict[str, ClientMemory] = {
            name: ClientMemory(self, name, None if file else {}, file) for name, file in (files or {}).items()}
        self._resident: list[ClientMemory] = []
        #: this store's write in flight, if any: (its file, its future); see the module docstring
        self._writing: tuple[str, Future] | None = None
        #: files another process wrote (:meth:`adopt`), hashed when a checkpoint names them (:meth:`hashes_of`)
        self._adopted: set[str] = set()

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

    def file_of(self, name: str) -> str | None:
        """The file that holds ``name``'s memory (written first if it changed; ``None``: empty), for a process
        that reads it from ``directory`` itself (a parallel client, :mod:`privreid.flower.simulation`)."""
        memory = self.setdefault(name, {})
        memory.spill(self.round)
        self.wait(memory.file)
        return memory.file

    def adopt(self, name: str, file: str | None) -> None:
        """``name``'s memory is now ``file`` in ``directory`` (``None``: empty), written by another process."""
        old = self._memories.get(name)
        if old in self._resident:
            self._resident.remove(old)
        self._memories[name] = ClientMemory(self, name, None if file else {}, file)
        if file:
            self._adopted.add(file)

    def hashes_of(self, files: Mapping[str, str | None]) -> dict[str, str]:
        """Client name -> the hash of its file in ``files`` (:meth:`flush`'s result, every write waited for);
        files adopted from another process are hashed here, once."""
        for file in self._adopted:
            if (self.directory / file).is_file():
                self.hashes[file] = file_sha256(self.directory / file)
        self._adopted.clear()
        return {name: self.hashes[file] for name, file in files.items() if file and file in self.hashes}

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
        """Start writing ``data`` as ``name``'s memory of round ``round_no`` (atomically, on the writer thread).

        Returns the file's name at once; ``data`` must not be changed after
        (the memory drops it: :meth:`ClientMemory.spill`).
        """
        self.wait()
        self.directory.mkdir(parents=True, exist_ok=True)
        file = memory_file_name(name, round_no)
        self._writing = (file, _writer().submit(_save_and_hash, data, self.directory, file))
        return file

    def wait(self, file: str | None = None) -> None:
        """Block until the write in flight (only if it is ``file``'s, when given) is on disk; re-raise its error."""
        if self._writing is not None and file in (None, self._writing[0]):
            (written, pending), self._writing = self._writing, None
            digest = pending.result()
            if digest is not None:
                self.hashes[written] = digest

    def flush(self, *, wait: bool = True) -> dict[str, str | None]:
        """Write every changed memory and drop them all from RAM; client name -> file (``None``: empty).

        ``wait=False`` returns once the last write has started; :meth:`wait` before naming the files anywhere.
        """
        while self._resident:
            self._resident.pop(0).spill(self.round)
        if wait:
            self.wait()
        return {name: memory.file for name, memory in self._memories.items()}

    def prune(self, keep: Mapping[str, str | None]) -> None:
        """Delete the memory files that ``keep`` (the files the latest checkpoint names) does not name (files of
        another name are not privreid's: left alone)."""
        self.wait()
        named = {f for f in keep.values() if f}
        for path in self.directory.glob("*.pt"):
            if path.name not in named and MEMORY_FILE_NAMES.fullmatch(path.name):  # only what privreid wrote
                path.unlink(missing_ok=True)
        self.hashes = {file: h for file, h in self.hashes.items() if file in named}
