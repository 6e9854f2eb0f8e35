"""Checkpoints: the only hand-off between training and evaluation.

A checkpoint (``ckpt.pt``) is a dict of tensors and primitives: ``format``, ``privreid_version``, ``method``,
``round`` (rounds completed), ``config`` (:meth:`RunConfig.to_dict`), ``model_config`` (to rebuild the network),
``global_state`` (the global model's shared keys; empty without one), ``has_global_model`` (``False``:
standalone-type runs), ``global_eval_extra`` (local keys the global model is evaluated with, e.g. FedBN's
averaged norms), ``client_states`` (client -> local state dict), ``client_classes`` (client -> number of
identities), ``server_state`` (server-held tensors that are not weights, e.g. DPPT's global memory),
``server_client_state`` (client -> what the server strategy keeps about it, e.g. FedPav-CC's cluster model),
``observer_state`` (round observers', e.g. the privacy ledger's), ``client_memory`` (per-client state kept
between rounds, e.g. DP accountants; an in-process run keeps each in a file under ``client_memory/`` named by
``client_memory_files``: :mod:`privreid.federated.memory_store`), ``initial_local_state`` (the initial model's
local keys, classifier excluded), ``audit_holdout`` (images kept out of training), ``metrics``, ``comm`` (bytes
per round) and ``rng``.

Read with :class:`Checkpoint` (typed fields, defaults filled in once, :meth:`Checkpoint.load_model`, the one place
a model is rebuilt); :func:`load_checkpoint` returns the validated dict for code that edits and re-saves. Writes are
atomic (:func:`privreid.io.write_file_atomically`); reads use :func:`privreid.pickle_scan.safe_torch_load`
(arbitrary pickled objects are refused, never executed).
``integrity`` (:func:`integrity_hash`) is checked on load against accidents, not edits, so every field is also
checked as a flag would be (:func:`check_fields`). Every ``client_memory_files`` entry must lie inside the run's
``client_memory/`` and match its recorded sha256 (``client_memory_hashes``); a checkpoint without these hashes
is refused as incomplete."""

from __future__ import annotations

import hashlib
import os
import pickle
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from privreid import __version__
from privreid.errors import CheckpointError, ConfigError, NotACheckpointError
from privreid.io import save_torch, write_file_atomically
from privreid.pickle_scan import UnsafePickle, looks_like_pickle, safe_torch_load, unsafe_global
from privreid.rundir import MEMORY_DIR, is_memory_file_of, memory_file_path

StateDict = dict[str, torch.Tensor]

FORMAT = "privreid-ckpt-v1"
#: client-memory prefix of the shared keys a client keeps from its last local training
#: (methods with ``keeps_trained_model``, see :class:`privreid.federated.registry.Method`)
TRAINED_PREFIX = "trained/"
#: the payload key of the checkpoint's :func:`integrity_hash`, recorded at save and checked on load
INTEGRITY_KEY = "integrity"
#: the payload key of the client-memory files' hashes (client name -> ``sha256:<hex>`` of its file's bytes)
MEMORY_HASHES_KEY = "client_memory_hashes"
REQUIRED_KEYS = ("format", "method", "round", "config", "model_config", "global_state", "client_states")


def save_checkpoint(ckpt: dict[str, Any], path: str | os.PathLike, *,
                    before_commit: Callable[[], None] | None = None) -> Path:
    """Atomically write ``ckpt`` (adding ``format`` and version) to ``path``.

    ``before_commit`` runs once the new file is on disk under a temporary name, before it replaces ``path``
    (the engine waits there for the client-memory files); if it raises, ``path`` is unchanged. A failed write
    raises its OSError (:func:`privreid.io.save_torch`); a FIFO or device at ``path`` is refused."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "privreid_version": __version__,
               **{k: v for k, v in ckpt.items() if k != INTEGRITY_KEY}}
    payload[INTEGRITY_KEY] = integrity_hash(payload)

    def write(tmp: Path) -> None:
        save_torch(payload, tmp, sync=True)
        if before_commit is not None:
            before_commit()

    write_file_atomically(path, write, stream=False)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu", *,
                    client_memory: bool = True, check_memory: bool | None = None) -> dict[str, Any]:
    """Load and validate a privreid checkpoint (:func:`check_fields`); :class:`CheckpointError` otherwise.

    Memory files (``client_memory_files``) are checked against ``client_memory_hashes`` and read into
    ``client_memory``, so the result re-saved is complete. ``client_memory=False`` leaves them out and keeps the
    hashes; ``check_memory`` (default: ``client_memory``) whether they are checked all the same (``--resume``:
    :func:`privreid.federated.resume.resume_checkpoint`). No integrity hash or memory hashes: refused."""
    return check_checkpoint(read_torch_file(path, map_location), path, client_memory=client_memory,
                            check_memory=check_memory)


def read_torch_file(path: str | os.PathLike, map_location: str | torch.device = "cpu", *,
                    what: str = "a checkpoint") -> Any:
    """What the torch file ``path`` holds, read once (:func:`~privreid.pickle_scan.safe_torch_load`).  CheckpointError
    for a missing path, a directory, a file cut short or one whose pickle names a global ``what`` never holds (nothing
    is executed); NotACheckpointError for a file that is no torch file."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a checkpoint; give the file (e.g. {path / 'ckpt.pt'})")
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}" if not path.exists() else
                              f"{path} is not a regular file (a FIFO or device), not a checkpoint")
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a foreign file; the error says it
            warnings.simplefilter("ignore")
            ckpt = safe_torch_load(path, map_location=map_location)
    except pickle.UnpicklingError as exc:
        if not isinstance(exc, UnsafePickle) and not looks_like_pickle(path):  # text, noise: torch's legacy reader
            raise NotACheckpointError(f"{path} is not a privreid checkpoint (not a torch file)") from exc
        found = f"the global {exc.found}" if isinstance(exc, UnsafePickle) else \
            "objects that are not plain tensors/containers"
        raise CheckpointError(f"refusing to load {path}: it contains {found}, which {what} never holds "
                              "(nothing was executed)") from exc
    except Exception as exc:  # truncated file, not a zip/pickle, wrong magic ...
        if _cut_short(path):
            raise CheckpointError(f"{path} is a torch file cut short or damaged (its archive does not read to the "
                                  "end: an interrupted copy or download?); restore it from a copy") from exc
        raise NotACheckpointError(f"{path} is not a privreid checkpoint (not a readable torch file: "
                              f"{type(exc).__name__})") from exc
    return ckpt


def check_checkpoint(ckpt: Any, path: str | os.PathLike, *, client_memory: bool = True,
                     check_memory: bool | None = None) -> dict[str, Any]:
    """``ckpt``, read from ``path`` by :func:`read_torch_file`, validated as :func:`load_checkpoint` does."""
    path = Path(path)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise NotACheckpointError(f"{path} is not a privreid checkpoint (expected format {FORMAT!r})")
    files = ckpt.get("client_memory_files")
    missing = [k for k in (*REQUIRED_KEYS, INTEGRITY_KEY, *([MEMORY_HASHES_KEY] if files is not None else []))
               if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path} is incomplete: missing {', '.join(missing)}")
    if ckpt.pop(INTEGRITY_KEY) != integrity_hash(ckpt):
        raise CheckpointError(f"{path} is corrupted (integrity hash mismatch); restore it from a copy or "
                              "train again")
    check_fields(ckpt, path)  # the hash detects accidents, not edits: anyone can recompute it
    if files is None:
        return ckpt
    hashes = ckpt.pop(MEMORY_HASHES_KEY)
    check = client_memory if check_memory is None else check_memory
    _check_client_memories(path, ckpt["round"], files, hashes, hash_files=check)
    memories = _read_client_memories(path, ckpt["round"], files) if check else None  # mapped, not read
    if client_memory:
        # inline, so the returned dict is self-contained: saving it elsewhere writes a whole checkpoint
        ckpt["client_memory"] = memories
        del ckpt["client_memory_files"]
    else:
        ckpt[MEMORY_HASHES_KEY] = hashes
    return ckpt


def _is_state(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                           for k, v in value.items())


def _by_client(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, dict) and all(isinstance(k, str) and check(v) for k, v in value.items())


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: checkpoint key -> (what it must be, in words; the check); a key absent from a checkpoint takes its default
FIELD_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "method": ("a method name", lambda v: isinstance(v, str)),
    "round": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "config": ("a mapping", lambda v: isinstance(v, dict)),
    "model_config": ("a mapping", lambda v: isinstance(v, dict)),
    "global_state": ("a mapping of key names to tensors", _is_state),
    "server_state": ("a mapping of key names to tensors", _is_state),
    "global_eval_extra": ("a mapping of key names to tensors", _is_state),
    "initial_local_state": ("a mapping of key names to tensors", lambda v: v is None or _is_state(v)),
    "client_states": ("a mapping of client names to states (key names to tensors)", _by_client(_is_state)),
    "client_classes": ("a mapping of client names to identity counts", _by_client(_is_count)),
    "client_memory": ("a mapping of client names to mappings", _by_client(lambda v: isinstance(v, dict))),
    "server_client_state": ("a mapping of client names to mappings", _by_client(lambda v: isinstance(v, dict))),
    "client_memory_files": ("a mapping of client names to file names",
                            _by_client(lambda v: v is None or isinstance(v, str))),
    "client_memory_hashes": ("a mapping of client names to sha256 hashes",
                             _by_client(lambda v: isinstance(v, str) and v.startswith("sha256:"))),
    "has_global_model": ("true or false", lambda v: isinstance(v, bool)),
    "observer_state": ("a mapping", lambda v: isinstance(v, dict)),
    "audit_holdout": ("a mapping", lambda v: isinstance(v, dict)),
    "metrics": ("a list of records", lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v)),
    "comm": ("a list of records", lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v)),
}


def check_fields(ckpt: dict[str, Any], path: str | os.PathLike) -> None:
    """Refuse, in one line naming the field, a checkpoint any field of which a command could not use as it
    stands, whether or not the command reads it: each field's type (:data:`FIELD_CHECKS`), a registered method,
    ``round`` within 0..the configured rounds, and the configuration checked as flags are
    (:meth:`privreid.config.RunConfig.from_dict` and ``validate``: ranges, the image-side cap ...)."""
    from privreid.config import MAX_FEAT_DIM, RunConfig

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{path} is not a checkpoint privreid can use: {what}; restore it from a copy or "
                               "train again")

    for key, (what, ok) in FIELD_CHECKS.items():
        if key in ckpt and not ok(ckpt[key]):
            raise bad(f"{key} must be {what} (got {type(ckpt[key]).__name__} {ckpt[key]!r:.40})")
    try:
        config = RunConfig.from_dict(ckpt["config"]).validate()
        from privreid.federated.registry import check_method_name

        check_method_name(ckpt["method"])
    except ConfigError as exc:
        raise bad(f"its configuration is refused ({exc})") from None
    if ckpt["method"] != config.federation.method:
        raise bad(f"method {ckpt['method']!r} is not its configuration's ({config.federation.method!r})")
    if not 0 <= ckpt["round"] <= config.federation.rounds:
        raise bad(f"round must lie in 0..{config.federation.rounds}, its configured rounds (got {ckpt['round']})")
    feat_dim = ckpt["model_config"].get("feat_dim")
    if not (isinstance(feat_dim, int) and not isinstance(feat_dim, bool) and 1 <= feat_dim <= MAX_FEAT_DIM):
        raise bad(f"model_config.feat_dim must be an integer in 1..{MAX_FEAT_DIM} (got {feat_dim!r:.40})")


def _cut_short(path: Path) -> bool:
    """Whether ``path`` starts as a torch file does (a zip archive) but does not end as one: truncated or damaged.

    A whole torch file ends with the zip's end-of-central-directory record (22 bytes, no comment).  Not
    ``zipfile.is_zipfile``: it searches the last 64 KiB for that record's signature, which the tensor bytes of a
    file cut in the middle can hold by chance (the message then depended on the weights)."""
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(size - 22, 0))
        tail = fh.read(4)
    return head == b"PK\x03\x04" and (tail != b"PK\x05\x06" or not zipfile.is_zipfile(path))


def integrity_hash(ckpt: dict[str, Any]) -> str:
    """``sha256:<hex>`` of a checkpoint's content: every key, primitive and tensor (dtype, shape, bytes) in order.

    Stored in the payload (:data:`INTEGRITY_KEY`), not a sidecar, so ``ckpt.pt`` alone is whole; computed over
    the objects, not the zip, so a flipped tensor byte (which torch loads silently) changes it. Cost: one SHA-256
    pass over the tensors (about 0.1-0.2 s per 100 MB), on every save and load."""
    digest = hashlib.sha256()

    def feed(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            digest.update(f"T{t.dtype}{tuple(t.shape)}|".encode())
            if t.numel():
                digest.update(t.reshape(-1).view(torch.uint8).numpy())
        elif isinstance(obj, dict):
            digest.update(f"D{len(obj)}|".encode())
            for k, v in obj.items():
                feed(k)
                feed(v)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
            digest.update(f"{type(obj).__name__[0]}{len(obj)}|".encode())
            for v in items:
                feed(v)
        else:  # str, int, float, bool, None
            digest.update(f"{type(obj).__name__}:{obj!r}|".encode())

    feed({k: v for k, v in ckpt.items() if k != INTEGRITY_KEY})
    return "sha256:" + digest.hexdigest()


def _check_client_memories(path: Path, round_no: int, files: dict[str, str | None], hashes: dict[str, str], *,
                           hash_files: bool) -> None:
    """Refuse, in one line naming the file and the round, a client-memory file of the checkpoint at ``path`` that
    lies outside its run, is missing or not a regular file, would import an unsafe global, differs from its
    sha256 in ``hashes``, or is not a whole torch file. Without ``hash_files`` it reads no tensor data; so
    ``--resume`` is refused before its first round."""
    for name, file in files.items():
        if not file:
            continue
        memory = memory_file_path(path.parent / MEMORY_DIR, file)
        kept = f"{path} (round {round_no}) keeps client {name}'s memory in {memory}"
        if not is_memory_file_of(file, name, round_no):
            raise CheckpointError(f"{kept}, which is not that client's file of a round up to {round_no} (the "
                                  "checkpoint was edited); restore it from a copy")
        if not memory.exists():
            raise CheckpointError(f"{kept}, which is missing; copy the run directory whole")
        if not memory.is_file():
            raise CheckpointError(f"{kept}, which is not a regular file (a directory, FIFO or device); restore "
                                  "the file from a copy")
        found = unsafe_global(memory)
        if found is not None:
            raise CheckpointError(f"refusing to load {memory} (client {name}'s memory of round {round_no}): it "
                                  f"contains the global {found}, which a memory never holds (nothing was executed)")
        if hash_files and file_sha256(memory) != hashes.get(name):
            raise CheckpointError(f"{kept}, whose bytes are not those the checkpoint recorded (changed, truncated "
                                  "or another client's file); restore it from a copy")
        if not zipfile.is_zipfile(memory):
            raise CheckpointError(f"{kept}, which is truncated or not a torch file; restore it from a copy")


def _read_client_memories(path: Path, round_no: int, files: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """The memories :func:`_check_client_memories` passed, read; a file that still fails to load: one line."""
    out = {}
    for name, file in files.items():
        if not file:
            out[name] = {}
            continue
        memory = path.parent / MEMORY_DIR / file
        try:
            out[name] = load_memory_file(memory)
        except CheckpointError:
            raise
        except Exception as exc:  # damaged inside a whole zip
            raise CheckpointError(f"{path} (round {round_no}) keeps client {name}'s memory in {memory}, which is "
                                  f"not readable ({type(exc).__name__}); restore it from a copy") from exc
    return out


def load_memory_file(path: Path) -> dict[str, Any]:
    """One client memory written by :class:`ClientMemories` (plain tensors and containers only).  Tensors are
    mapped privately (``mmap=True``): an entry is read only when used, and writing to it never changes the file,
    which an earlier checkpoint may still name."""
    memory = safe_torch_load(path, map_location="cpu", mmap=True)
    if not isinstance(memory, dict) or not all(isinstance(k, str) for k in memory):
        raise CheckpointError(f"{path} is not a client memory privreid wrote (a memory is a mapping of names to "
                              f"values; got {type(memory).__name__}); restore it from a copy")
    trained = next((k for k, v in memory.items() if k.startswith("trained/") and not isinstance(v, torch.Tensor)),
                   None)
    if trained is not None:
        raise CheckpointError(f"{path} is not a client memory privreid wrote ({trained} must be a tensor, got "
                              f"{type(memory[trained]).__name__}); restore it from a copy")
    return memory


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of the bytes of the file at ``path`` (what a checkpoint records of each memory file)."""
    with open(path, "rb") as fh:
        return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()


def personal_state(global_state: dict[str, torch.Tensor], local_state: dict[str, torch.Tensor],
                   memory: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A client's personalised model: the global model's keys, then the trained ones, then its local keys.

    Shared keys the client kept from its last training (memory entries under :data:`TRAINED_PREFIX`, for
    methods whose papers score the trained local model) replace the global ones; without them this is the model
    the client holds after the latest download."""
    trained = {k[len(TRAINED_PREFIX):]: v for k, v in memory.items() if k.startswith(TRAINED_PREFIX)}
    return {**global_state, **trained, **local_state}


@dataclass(frozen=True)
class Checkpoint:
    """A privreid checkpoint, loaded: what a run saved after its last completed round.

    The fields are its keys (module docstring); keys a hand-made dict (:meth:`from_dict`) lacks take the defaults
    below. ``client_memory_files`` is set only when memories were left unread; unnamed keys are kept in ``other``."""

    method: str
    round: int  #: rounds completed
    config: dict[str, Any]  #: :meth:`RunConfig.to_dict` (:attr:`run_config` parses it)
    model_config: dict[str, Any]
    global_state: StateDict  #: the shared model keys (:attr:`shared_keys`); empty without a global model
    client_states: dict[str, StateDict]  #: client name -> its local keys
    has_global_model: bool = True
    #: server-held tensors that are not model weights (DPPT's centres and shared head)
    server_state: StateDict = field(default_factory=dict)
    #: local keys the global model is evaluated with (FedBN's averaged norms)
    global_eval_extra: StateDict = field(default_factory=dict)
    server_client_state: dict[str, dict[str, Any]] = field(default_factory=dict)
    client_memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    client_memory_files: dict[str, str | None] | None = None
    #: client name -> the sha256 of its memory file (with :attr:`client_memory_files`)
    client_memory_hashes: dict[str, str] = field(default_factory=dict)
    initial_local_state: StateDict | None = None
    client_classes: dict[str, int] = field(default_factory=dict)
    observer_state: dict[str, Any] = field(default_factory=dict)
    audit_holdout: dict[str, list] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    comm: list[dict[str, int]] = field(default_factory=list)
    rng: Any = None
    privreid_version: str | None = None
    path: Path | None = None  #: the file it was loaded from
    other: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike, *, client_memory: bool = True, check_memory: bool | None = None,
             map_location: str | torch.device = "cpu") -> Checkpoint:
        """Load and validate the checkpoint at ``path`` (:func:`load_checkpoint`); ``client_memory=False``
        leaves memory files unread (:attr:`client_memory_files`), for the engine to resume lazily."""
        return cls.from_dict(load_checkpoint(path, map_location, client_memory=client_memory,
                                             check_memory=check_memory), path=Path(path))

    @classmethod
    def from_dict(cls, ckpt: dict[str, Any], *, path: str | os.PathLike | None = None) -> Checkpoint:
        """The checkpoint held in the dict ``ckpt`` (as saved by :func:`save_checkpoint`)."""
        missing = [k for k in REQUIRED_KEYS if k not in ckpt and k != "format"]
        if missing:
            raise CheckpointError(f"{path or 'checkpoint'} is incomplete: missing {', '.join(missing)}")
        named = {f.name for f in fields(cls)} - {"round", "path", "other"}
        return cls(**{k: v for k, v in ckpt.items() if k in named}, round=int(ckpt["round"]),
                   path=None if path is None else Path(path),
                   other={k: v for k, v in ckpt.items() if k not in named | {"format", "round"}})

    @classmethod
    def of(cls, source: str | os.PathLike | dict[str, Any] | Checkpoint) -> Checkpoint:
        """``source`` as a :class:`Checkpoint`: itself, a checkpoint dict, or a file to :meth:`load`."""
        if isinstance(source, Checkpoint):
            return source
        return cls.from_dict(source) if isinstance(source, dict) else cls.load(source)

    @property
    def run_config(self):
        """The run's :class:`privreid.config.RunConfig`."""
        from privreid.config import RunConfig

        return RunConfig.from_dict(self.config)

    @property
    def shared_keys(self) -> frozenset[str]:
        """The model keys clients share through the server (server-side method state apart)."""
        return frozenset(self.global_state)

    @property
    def trained_clients(self) -> list[str]:
        """The clients that have trained (hold a local state), sorted."""
        return sorted(self.client_states)

    @property
    def clients(self) -> list[str]:
        """Every client :meth:`load_model` can rebuild, sorted: the trained ones and, where the run keeps
        an initial local state, those that have not trained yet."""
        waiting = set(self.client_classes) if self.initial_local_state is not None else set()
        return sorted(set(self.client_states) | waiting)

    def load_model(self, client: str | None = None, *, device: str | torch.device = "cpu") -> torch.nn.Module:
        """Rebuild this checkpoint's model, in eval mode: the global one (``client=None``, with
        :attr:`global_eval_extra`) or ``client``'s personalised one, the model the engine scores in its
        ``scope: "local"`` records (:func:`personal_state`). Standalone methods require a client."""
        from privreid.models.reid_net import CLASSIFIER_PREFIX, is_classifier_key

        if client is None and not self.has_global_model:
            raise CheckpointError(f"method {self.method!r} has no global model; pick a client with --client "
                                  f"({', '.join(self.clients)})")
        if client is not None and client not in self.client_states and not (
                client in self.client_classes and self.initial_local_state is not None):
            raise CheckpointError(f"no client {client!r} in checkpoint; clients: {', '.join(self.clients)}")
        model = self.initial_model()
        state = dict(self.global_state)
        if client is None:
            state.update(self.global_eval_extra)
        else:
            local = self.client_states.get(client, self.initial_local_state)  # not trained yet: the initial one
            # a classifier every client shares (DPPT's global-label classifier, L2RW+ Eq. 8) is server-side state
            shared_head = {k: v for k, v in self.server_state.items() if is_classifier_key(k)}
            if any(is_classifier_key(k) for k in local):
                model.reset_classifier(int(self.client_classes[client]))
            elif shared_head:
                model.reset_classifier(int(shared_head[CLASSIFIER_PREFIX + "weight"].shape[0]))
                state.update(shared_head)
            state = personal_state(state, local, self.client_memory.get(client, {}))
        expected = model.state_dict()
        for key, value in state.items():
            if key in expected and tuple(value.shape) != tuple(expected[key].shape):
                raise CheckpointError(f"checkpoint does not match its model config: {key} has shape "
                                      f"{tuple(value.shape)} in the checkpoint, {tuple(expected[key].shape)} in the "
                                      f"model {self.model_config} builds")
        nonfinite = next((k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)
        if nonfinite is not None:
            raise CheckpointError(f"{self.path or 'checkpoint'} holds non-finite weights ({nonfinite} has inf/NaN "
                                  "values): the run it comes from diverged; evaluate an earlier checkpoint")
        missing, unexpected = model.load_state_dict(state, strict=False)
        bad_missing = [k for k in missing if not is_classifier_key(k)]
        if unexpected or bad_missing:
            raise CheckpointError(f"checkpoint does not match its model config (missing {bad_missing[:3]}, "
                                  f"unexpected {list(unexpected)[:3]})")
        return model.to(device).eval()

    def initial_model(self) -> torch.nn.Module:
        """A fresh model of this checkpoint's architecture from the current RNG state, without a classifier."""
        from privreid.models.build import build_from_config

        return build_from_config({**self.model_config, "num_classes": 0})


def load_model(path_or_ckpt: str | os.PathLike | dict[str, Any] | Checkpoint, *, client: str | None = None,
               device: str | torch.device = "cpu") -> torch.nn.Module:
    """:meth:`Checkpoint.load_model` of a checkpoint file (or dict, or :class:`Checkpoint`)."""
    return Checkpoint.of(path_or_ckpt).load_model(client, device=device)


def checkpoint_labels(ckpts: list[Checkpoint]) -> list[str]:
    """``method (run dir)`` per loaded checkpoint, made unique with ``#2``, ``#3`` ... where they repeat."""
    return unique_labels([checkpoint_label(ckpt) for ckpt in ckpts])


def checkpoint_label(ckpt: Checkpoint) -> str:
    """``method (run dir)``: how reports name a checkpoint."""
    return f"{ckpt.method} ({ckpt.path.parent.name or ckpt.path.stem})"


def unique_labels(bases: list[str]) -> list[str]:
    """``bases`` with repeats made unique: ``a``, ``a #2``, ``a #3`` ..."""
    labels: list[str] = []
    for base in bases:
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base} #{n}"
        labels.append(label)
    return labels


def label_file_stem(label: str) -> str:
    """A checkpoint label made safe as a file or folder name."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "model"
