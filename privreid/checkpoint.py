"""Checkpoints: the only hand-off between training and evaluation.

A checkpoint (``ckpt.pt``) is a dict of tensors and primitives:

``format``, ``privreid_version``, ``method``, ``round`` (rounds completed),
``config`` (:meth:`RunConfig.to_dict`), ``model_config`` (to rebuild the
network), ``global_state`` (the shared keys of the global model; empty for
methods without one), ``client_states`` (client name -> its local state dict),
``client_classes`` (client name -> number of identities), ``server_state``
(server-held tensors that are not model weights, e.g. DPPT's global memory),
``server_client_state`` (client name -> what the server strategy keeps about
that client, e.g. FedPav-CC's cluster model; absent in older checkpoints),
``client_memory`` (per-client state kept between rounds, e.g. DP accountants;
an in-process run keeps each in a file under ``client_memory/`` next to the
checkpoint, named by ``client_memory_files``, and :func:`load_checkpoint`
reads them back: :mod:`privreid.federated.memory_store`),
``initial_local_state`` (the local keys, classifier excluded, of the initial
model: the local state of a client that has not trained yet),
``metrics`` (list of metric records), ``comm`` (bytes per round), ``rng`` and
``extra``.

A client's personalised model is assembled from the checkpoint by
:func:`personal_state`, the function the engine scores it with.

Writes are atomic (temporary file in the same directory, then ``os.replace``),
so a crash never leaves a truncated checkpoint.  Reads use
``torch.load(weights_only=True)``: a checkpoint carrying arbitrary pickled
objects is refused instead of executed.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from . import __version__
from .errors import CheckpointError

FORMAT = "privreid-ckpt-v1"
#: client-memory prefix of the shared keys a client keeps from its last local training
#: (methods with ``keeps_trained_model``, see :class:`privreid.federated.registry.Method`)
TRAINED_PREFIX = "trained/"
REQUIRED_KEYS = ("format", "method", "round", "config", "model_config", "global_state", "client_states")


def save_checkpoint(ckpt: dict[str, Any], path: str | os.PathLike) -> Path:
    """Atomically write ``ckpt`` (adding ``format`` and version) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "privreid_version": __version__, **ckpt}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu", *,
                    client_memory: bool = True) -> dict[str, Any]:
    """Load and validate a privreid checkpoint; :class:`CheckpointError` otherwise.

    The client memories kept in files (``client_memory_files``) are read into
    ``client_memory``, and ``client_memory_files`` is dropped, so the result
    saved anywhere with :func:`save_checkpoint` is a complete checkpoint.
    ``client_memory=False`` leaves them unread: the engine resumes them lazily.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a foreign file; the error says it
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        from .pickle_scan import unsafe_global

        found = unsafe_global(path)
        what = f"the global {found}" if found else "objects that are not plain tensors/containers"
        raise CheckpointError(f"refusing to load {path}: it contains {what}, which a checkpoint never holds "
                              "(nothing was executed)") from exc
    except Exception as exc:  # truncated file, not a zip/pickle, wrong magic ...
        raise CheckpointError(f"{path} is not a privreid checkpoint (not a readable torch file: "
                              f"{type(exc).__name__})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a privreid checkpoint (expected format {FORMAT!r})")
    missing = [k for k in REQUIRED_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path} is incomplete: missing {', '.join(missing)}")
    if client_memory and "client_memory_files" in ckpt:
        # read inline, so the returned dict is self-contained: saving it elsewhere writes a whole checkpoint
        ckpt["client_memory"] = _read_client_memories(path.parent, ckpt.pop("client_memory_files"))
    return ckpt


def _read_client_memories(run_dir: Path, files: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    from .federated.memory_store import MEMORY_DIR, load_memory_file

    out = {}
    for name, file in files.items():
        if not file:
            out[name] = {}
            continue
        path = run_dir / MEMORY_DIR / file
        try:
            out[name] = load_memory_file(path)
        except FileNotFoundError:
            raise CheckpointError(f"{run_dir / 'ckpt.pt'} keeps client {name}'s memory in {path}, which is "
                                  f"missing; copy the run directory whole") from None
        except pickle.UnpicklingError as exc:
            raise CheckpointError(f"refusing to load {path}: it holds objects that are not plain "
                                  "tensors/containers (nothing was executed)") from exc
    return out


def checkpoint_clients(ckpt: dict[str, Any]) -> list[str]:
    return sorted(set(ckpt["client_states"]) | (set(ckpt.get("client_classes", {}))
                                                if "initial_local_state" in ckpt else set()))


def personal_state(global_state: dict[str, torch.Tensor], local_state: dict[str, torch.Tensor],
                   memory: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A client's personalised model: the global model's keys, then the trained ones, then its local keys.

    ``global_state`` holds the global model's keys (no server-side method
    state), ``local_state`` the client's local keys, ``memory`` its memory.
    Shared keys the client kept from its last local training (memory entries
    under :data:`TRAINED_PREFIX`, present for methods whose papers score the
    trained local model) replace the global ones.  Without them this is the
    model the client holds after the server's latest download.
    """
    trained = {k[len(TRAINED_PREFIX):]: v for k, v in memory.items() if k.startswith(TRAINED_PREFIX)}
    return {**global_state, **trained, **local_state}


def load_model(path_or_ckpt: str | os.PathLike | dict[str, Any], *, client: str | None = None,
               device: str | torch.device = "cpu") -> torch.nn.Module:
    """Rebuild the model a checkpoint describes, in eval mode.

    ``client=None`` gives the global model (the shared state); ``client=NAME``
    gives that client's personalised model, exactly the one the engine scores
    in its ``scope: "local"`` records (:func:`personal_state` of the global
    state, the client's memory and its local state, classifier included; a
    client that has not trained yet has the initial local state and no
    classifier).  Methods without a global model (standalone) require a
    client.  Every evaluation subsystem loads models through here.
    """
    from .models import build_from_config

    ckpt = path_or_ckpt if isinstance(path_or_ckpt, dict) else load_checkpoint(path_or_ckpt)
    model = build_from_config({**ckpt["model_config"], "num_classes": 0})
    state = dict(ckpt["global_state"])
    if client is None:
        state.update(ckpt.get("global_eval_extra", {}))
        if not ckpt.get("has_global_model", True):
            raise CheckpointError(f"method {ckpt['method']!r} has no global model; pick a client with --client "
                                  f"({', '.join(checkpoint_clients(ckpt))})")
    else:
        if client in ckpt["client_states"]:
            local = ckpt["client_states"][client]
        elif client in ckpt.get("client_classes", {}) and "initial_local_state" in ckpt:
            local = ckpt["initial_local_state"]  # not trained yet
        else:
            raise CheckpointError(f"no client {client!r} in checkpoint; clients: {', '.join(checkpoint_clients(ckpt))}")
        # a classifier every client shares (DPPT's global-label classifier, L2RW+ Eq. 8) is server-side state
        shared_head = {k: v for k, v in ckpt.get("server_state", {}).items() if k.startswith("classifier.")}
        if any(k.startswith("classifier.") for k in local):
            model.reset_classifier(int(ckpt["client_classes"][client]))
        elif shared_head:
            model.reset_classifier(int(shared_head["classifier.weight"].shape[0]))
            state.update(shared_head)
        state = personal_state(state, local, ckpt.get("client_memory", {}).get(client, {}))
    missing, unexpected = model.load_state_dict(state, strict=False)
    bad_missing = [k for k in missing if not k.startswith("classifier.")]
    if unexpected or bad_missing:
        raise CheckpointError(f"checkpoint does not match its model config (missing {bad_missing[:3]}, "
                              f"unexpected {list(unexpected)[:3]})")
    return model.to(device).eval()


def checkpoint_labels(paths: list[Path], ckpts: list[dict[str, Any]]) -> list[str]:
    """``method (run dir)`` per checkpoint, made unique with ``#2``, ``#3`` ... where they repeat."""
    labels: list[str] = []
    for path, ckpt in zip(paths, ckpts):
        path = Path(path)
        base = f"{ckpt['method']} ({path.parent.name or path.stem})"
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
