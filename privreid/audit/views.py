"""Adversaries (``privreid audit --view``): which models the attacker holds.

``public``
    The released model: the final global model, or the personalised model of
    ``--client`` (global shared state plus that client's local layers and
    classifier), via :func:`privreid.checkpoint.load_model`.
``server``
    The honest-but-curious server of a federation: the uploads of the audited
    client, one round (``--round R``) or all rounds it took part in.

How the server view gets the uploads: the checkpoint holds only the final
state, so privreid **re-derives them deterministically**.  Training is seeded
from ``(seed, round, client)`` (:mod:`privreid.seeding`), so replaying the
run from its configuration (:class:`UploadRecorder`, the engine with a
recording ``receive``) reproduces every upload; the replay is
**verified** against the checkpoint (its final global state must equal the
checkpoint's, tensor for tensor) and the record says so
(``replay_verified``).  Cost: one training run per audited checkpoint,
cached under ``DIR/cache/uploads/``.  Nothing extra is stored at training
time, so any existing checkpoint can be audited.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Callable

import torch

from ..config import RunConfig
from ..errors import ConfigError
from ..federated.engine import FederatedEngine

VIEWS = ("public", "server")


class UploadRecorder(FederatedEngine):
    """The engine, keeping a copy of what one client uploads in every round it takes part in."""

    def __init__(self, *args, audited: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.audited = audited
        self.recorded: dict[int, dict[str, torch.Tensor]] = {}

    def receive(self, inbox, upload):
        if upload.client == self.audited:
            self.recorded[inbox.round_no] = {k: v.detach().clone() for k, v in upload.state.items()}
        super().receive(inbox, upload)


def replay_uploads(ckpt: dict, client: str, cache: Path, *, progress: bool = False,
                   echo: Callable[[str], None] = lambda _: None) -> tuple[dict[int, dict[str, torch.Tensor]], bool]:
    """``(round -> upload of client, verified)``; replays the run once and caches the result."""
    from ..data.catalog import federation_for_config
    from ..federated.engine import prepare_out_dir

    if not ckpt.get("comm"):
        raise ConfigError(f"method {ckpt['method']!r} sends nothing to a server; the server view needs a federation")
    config = RunConfig.from_dict(ckpt["config"])
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, rounds=int(ckpt["round"])))
    digest = hashlib.sha256(json.dumps([config.to_dict(), client], sort_keys=True).encode()).hexdigest()[:10]
    store = cache / "uploads" / f"{client.replace('/', '_')}-{digest}.pt"
    if store.is_file():
        saved = torch.load(store, weights_only=True)
        return {int(r): s for r, s in saved["uploads"].items()}, bool(saved["verified"])
    federation = federation_for_config(config)
    if client not in [c.name for c in federation.clients]:
        raise ConfigError(f"no client {client!r} in the run; clients: {', '.join(c.name for c in federation.clients)}")
    run = store.with_suffix("")
    echo(f"server view: replaying the run to re-derive {client}'s uploads ({run})")
    engine = UploadRecorder(config, federation, run, progress=progress, log=lambda _: None, audited=client)
    prepare_out_dir(run, overwrite=True, resume=False)
    engine.run()
    final = {k: v for k, v in engine.global_state.items() if k in ckpt["global_state"]}
    verified = final.keys() == ckpt["global_state"].keys() and all(
        torch.equal(final[k].cpu(), ckpt["global_state"][k].cpu()) for k in final)
    store.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"uploads": {str(r): s for r, s in engine.recorded.items()}, "verified": verified}, store)
    return engine.recorded, verified


def upload_model(ckpt: dict, upload: dict[str, torch.Tensor], device: torch.device | str = "cpu") -> torch.nn.Module:
    """The global architecture holding one upload's shared keys (the server's copy of the client's model)."""
    from ..checkpoint import load_model

    model = load_model({**ckpt, "has_global_model": True}, device=device)
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in upload.items() if k in own}, strict=False)
    return model.eval()
