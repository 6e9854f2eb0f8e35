"""Adversaries (``privreid audit --view``): which models the attacker holds.

``public``: the released model, global or ``--client``'s personalised one
(:meth:`privreid.checkpoint.Checkpoint.load_model`). ``server``: the honest-but-curious server: the audited
client's uploads, one round (``--round R``) or all. ``server-aggregate``: that server under secure aggregation
(:mod:`privreid.defenses.secure_aggregation.mechanism`): per round only the sum of the ``m`` uploads, attacked
as the weighted mean ``sum_k w_k theta_k / sum_k w_k`` of the shared floating keys (the method's weights;
integer buffers as released). Quantisation is not simulated (about ``2c/Q``) and client-DP shares are not
added: an upper bound for a distributed-DP run. Methods whose server is not a weighted mean are refused.

The checkpoint holds only the final state, so uploads are **re-derived**: training is seeded from ``(seed,
round, client)``, so replaying the run (:class:`UploadRecorder`) reproduces every upload, and the replay is
**verified** (its final global state must equal the checkpoint's; ``replay_verified``). Cost: one training run
per checkpoint, cached under ``DIR/cache/uploads/``; any checkpoint can be audited.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import torch

from privreid.checkpoint import Checkpoint
from privreid.config import RunConfig
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.federated.strategy import uniform
from privreid.pickle_scan import safe_torch_load
from privreid.io import save_torch_atomic
from privreid.composition import build_run, method_of

VIEWS = ("public", "server", "server-aggregate")


@dataclasses.dataclass
class RoundSum:
    """One round's sum of the selected clients' uploads: ``sum_k w_k theta_k`` (float64), ``sum_k w_k``, who."""

    sum: dict[str, torch.Tensor]
    weight: float
    clients: list[str]

    def mean(self) -> dict[str, torch.Tensor]:
        """``sum_k w_k theta_k / sum_k w_k``: the model the server computes from the secure sum."""
        return {k: v / self.weight for k, v in self.sum.items()}


class UploadRecorder(FederatedEngine):
    """The engine, keeping a copy of what one client uploads in every round it takes part in, and the sum of
    that round's uploads (:class:`RoundSum`, weighted by ``weight(upload)``; None: no sums)."""

    def __init__(self, *args, audited: str, weight=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.audited, self.weight = audited, weight
        self.recorded: dict[int, dict[str, torch.Tensor]] = {}
        self.sums: dict[int, RoundSum] = {}

    def receive(self, inbox, upload):
        if upload.client == self.audited:
            self.recorded[inbox.round_no] = {k: v.detach().clone() for k, v in upload.state.items()}
        if self.weight is not None:
            w = float(self.weight(upload))
            total = self.sums.setdefault(inbox.round_no, RoundSum({}, 0.0, []))
            for k, v in upload.state.items():
                if torch.is_floating_point(v):
                    term = v.detach().to("cpu", torch.float64) * w
                    total.sum[k] = term if k not in total.sum else total.sum[k] + term
            total.weight += w
            total.clients.append(upload.client)
        super().receive(inbox, upload)


def mean_weight(config: RunConfig):
    """``w_k`` of the run's server mean (secure aggregation's pre-scaling: uniform under client DP, DP-FedAvg's
    mean); ConfigError for a method whose server reads each upload (it cannot run under secure aggregation)."""
    method = method_of(config)
    weight = None
    if method.needs_per_client_uploads is False:
        weight = uniform if config.privacy.client_dp else method.strategy(config).upload_weight()
    if weight is None:
        raise ConfigError(f"the server-aggregate view needs a server that averages the uploads; method "
                          f"{config.federation.method!r} reads each upload (it cannot run under secure aggregation)")
    return weight


def replay(ckpt: Checkpoint, client: str, cache: Path, *, aggregate: bool = False, progress: bool = False,
           echo: Callable[[str], None] = lambda _: None) -> tuple[dict[int, Any], bool]:
    """``(round -> upload of client, verified)``, or with ``aggregate`` ``round -> RoundSum`` of that round's
    uploads for the rounds client took part in; replays the run once and caches the result."""
    from privreid.data.catalog import federation_for_config
    from privreid.rundir import prepare_out_dir

    if not ckpt.comm:
        raise ConfigError(f"method {ckpt.method!r} sends nothing to a server; the server view needs a federation")
    config = ckpt.run_config
    config = config.with_values({"federation.rounds": ckpt.round})
    weight = mean_weight(config) if aggregate else None
    digest = hashlib.sha256(json.dumps([config.to_dict(), client], sort_keys=True).encode()).hexdigest()[:10]
    store = cache / "uploads" / f"{client.replace('/', '_')}-{digest}{'-sums' if aggregate else ''}.pt"
    if store.is_file():
        saved = safe_torch_load(store)
        uploads = {int(r): s for r, s in saved["uploads"].items()}
        sums = {int(r): RoundSum(**s) for r, s in saved.get("sums", {}).items()}
        verified = bool(saved["verified"])
    else:
        federation = federation_for_config(config)
        if client not in [c.name for c in federation.clients]:
            raise ConfigError(f"no client {client!r} in the run; clients: "
                              f"{', '.join(c.name for c in federation.clients)}")
        run = store.with_suffix("")
        echo(f"server view: replaying the run to re-derive {client}'s uploads{' and their sums' if aggregate else ''}"
             f" ({run})")
        engine = UploadRecorder(config, federation, run, progress=progress, log=lambda _: None, audited=client,
                                weight=weight, build=build_run)
        prepare_out_dir(run, overwrite=True, resume=False)
        engine.run()
        uploads, sums = engine.recorded, engine.sums
        final = {k: v for k, v in engine.global_state.items() if k in ckpt.shared_keys}
        verified = final.keys() == ckpt.shared_keys and all(
            torch.equal(final[k].cpu(), ckpt.global_state[k].cpu()) for k in final)
        store.parent.mkdir(parents=True, exist_ok=True)
        saved = {"uploads": {str(r): s for r, s in uploads.items()}, "verified": verified}
        if aggregate:
            saved["sums"] = {str(r): dataclasses.asdict(s) for r, s in sums.items()}
        save_torch_atomic(saved, store)
    return ({r: s for r, s in sums.items() if client in s.clients} if aggregate else uploads), verified


def upload_model(ckpt: Checkpoint, upload: dict[str, torch.Tensor], device: torch.device | str = "cpu"
                 ) -> torch.nn.Module:
    """The global architecture holding one upload's shared keys (the server's copy of the client's model)."""
    model = dataclasses.replace(ckpt, has_global_model=True).load_model(device=device)
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in upload.items() if k in own}, strict=False)
    return model.eval()
