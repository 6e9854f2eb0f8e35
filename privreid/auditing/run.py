"""``run_audit``: membership inference for every (checkpoint, level, attack, view); see :mod:`privreid.auditing`."""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from privreid.checkpoint import Checkpoint, checkpoint_labels
from privreid.errors import ConfigError
from privreid.composition import method_of
from privreid.auditing.membership_attacks import resolve_attacks
from privreid.auditing.membership import LEVELS, MembershipSet, build_membership
from privreid.auditing.metrics import summarise
from privreid.auditing.report import record_label, write_report
from privreid.auditing.statistics import ProbeOutputs, probe_outputs, unique_probes
from privreid.auditing.views import VIEWS, mean_weight, replay, upload_model


@dataclass
class AuditSettings:
    """What ``privreid audit`` measures (CLI defaults)."""

    levels: list[str] = field(default_factory=lambda: list(LEVELS))
    attacks: list[str] = field(default_factory=lambda: ["loss", "feature"])
    views: list[str] = field(default_factory=lambda: ["public"])
    #: the audited client: personalised model (public view), whose uploads (server view); None = global model
    client: str | None = None
    #: server view: one round (1-based) instead of all rounds
    round: int | None = None
    shadows: int = 4
    probes_per_identity: int = 4
    max_per_class: int | None = None
    extra_per_cam: int | None = None
    bootstrap: int = 200
    seed: int = 0

    def validate(self) -> "AuditSettings":
        for name, values, allowed in (("--level", self.levels, LEVELS), ("--view", self.views, VIEWS)):
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise ConfigError(f"{name}: unknown {', '.join(bad) or '(none given)'}; choose from {', '.join(allowed)}")
        attacks = resolve_attacks(self.attacks)
        if self.shadows < 2 or self.shadows % 2:
            raise ConfigError(f"--shadows must be even and >= 2 (got {self.shadows})")
        server = [v for v in self.views if v != "public"]
        if any(a.needs_shadows for a in attacks) and server:
            raise ConfigError("LiRA audits the public view (its shadow models are released models); "
                              f"drop --view {server[0]} or the lira attacks")
        if self.round is not None and self.round < 1:
            raise ConfigError(f"--round is 1-based (got {self.round})")
        if self.max_per_class is not None and self.max_per_class < 2:
            raise ConfigError("--max-per-class must be >= 2")
        if self.bootstrap < 0:
            raise ConfigError("--bootstrap must be >= 0")
        return self


def _server_view(ckpt: Checkpoint, client: str, round_no: int | None, cache: Path, device, aggregate: bool,
                 progress, echo) -> tuple[list, dict[str, Any]]:
    """The server's models of ``client`` (its uploads, or with ``aggregate`` per round the model holding the mean
    the server computes from the sum), one round or all, and what the record says of them."""
    found, verified = replay(ckpt, client, cache, aggregate=aggregate, progress=progress, echo=echo)
    if round_no is not None:
        if round_no not in found:
            raise ConfigError(f"client {client} uploaded in rounds {sorted(found)}, not in round {round_no}")
        found = {round_no: found[round_no]}
    if not found:
        raise ConfigError(f"client {client} never took part in a round")
    rounds = sorted(found)
    models = [upload_model(ckpt, found[r].mean() if aggregate else found[r], device) for r in rounds]
    summed = {"aggregated_clients": {str(r): found[r].clients for r in rounds}} if aggregate else {}
    observed = {"observed": "the weighted mean of the round's uploads (the secure sum / the sum of the weights)"}
    return models, {"client": client, "rounds": rounds, **summed, "replay_verified": verified,
                    **(observed if aggregate else {}),
                    "combine": "mean score over rounds" if len(rounds) > 1 else "one round"}


def run_audit(paths: list[str | os.PathLike], out: str | os.PathLike, settings: AuditSettings | None = None, *,
              device: str = "auto", progress: bool = False, cache: str | os.PathLike | None = None,
              echo: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Audit every checkpoint; write ``audit.json``, ``roc.png``, ``report.md`` into ``out``; the records."""
    from privreid.data.catalog import federation_for_config
    from privreid.device import resolve_device

    settings = (settings or AuditSettings()).validate()
    attacks = resolve_attacks(settings.attacks)
    if not paths:
        raise ConfigError("give at least one checkpoint (--models)")
    paths = [Path(p) for p in paths]
    ckpts = [Checkpoint.load(p) for p in paths]
    labels = checkpoint_labels(ckpts)
    for label, ckpt in zip(labels, ckpts):  # validate before any work
        if "public" in settings.views and settings.client is None and not ckpt.has_global_model:
            raise ConfigError(f"{label}: method {ckpt.method!r} has no global model; audit a client (--client)")
        if settings.client is not None and settings.client not in ckpt.client_states:
            raise ConfigError(f"{label}: no client {settings.client!r}; clients: {', '.join(ckpt.trained_clients)}")
        if settings.round is not None and settings.round > ckpt.round and set(settings.views) - {"public"}:
            raise ConfigError(f"{label}: --round {settings.round} is past the checkpoint's last round "
                              f"({ckpt.round}); nothing to replay")
        if "server-aggregate" in settings.views:
            mean_weight(ckpt.run_config)
    dev = resolve_device(device)
    out = Path(out)
    cache = Path(cache) if cache is not None else out / "cache"
    records: list[dict[str, Any]] = []
    curves = []
    for path, label, ckpt in zip(paths, labels, ckpts):
        config = ckpt.run_config
        federation = federation_for_config(config)
        method = method_of(config)
        trained = method.prepare_clients(federation.clients) if method.prepare_clients else federation.clients
        size = dict(height=config.data.height, width=config.data.width, device=dev)
        server_client = settings.client or ckpt.trained_clients[0]
        for level in settings.levels:
            @functools.cache
            def membership(scope: str | None) -> MembershipSet:
                return build_membership(level, ckpt.audit_holdout, config, federation, client=scope, trained=trained,
                                        probes_per_identity=settings.probes_per_identity,
                                        max_per_class=settings.max_per_class, extra_per_cam=settings.extra_per_cam,
                                        seed=settings.seed)

            for view in settings.views:
                if view == "public":
                    ms = membership(settings.client)
                    models = [ckpt.load_model(settings.client, device=dev)]
                    extra = {"model": f"client {settings.client} (personalised)" if settings.client else "global"}
                else:
                    ms = membership(server_client)
                    models, extra = _server_view(ckpt, server_client, settings.round, cache, dev,
                                                 view == "server-aggregate", progress, echo)
                probes = unique_probes(ms)
                echo(f"[{label}] {level} level, {view} view: {int(ms.labels.sum())} members, "
                     f"{int((~ms.labels).sum())} non-members, {len(probes)} probe images")
                outputs = [probe_outputs(m, probes, **size) for m in models]
                del models
                shadow_outputs: list[ProbeOutputs] | None = None
                masks = None
                for attack in attacks:
                    if attack.needs_shadows:
                        if shadow_outputs is None:
                            from privreid.auditing.shadows import train_shadows

                            masks, shadow_paths = train_shadows(config, federation, ms, settings.shadows, cache,
                                                                seed=settings.seed, progress=progress, echo=echo)
                            shadow_outputs = [
                                probe_outputs(Checkpoint.load(p).load_model(settings.client, device=dev), probes,
                                              **size) for p in shadow_paths]
                        scored = [attack.score(ms, outputs[0], shadow_outputs, masks)]
                    else:
                        scored = [attack.score(ms, o) for o in outputs]
                    scores = np.mean([s.scores for s in scored], axis=0)
                    rec = {"model": label, "checkpoint": str(path), "level": level, "attack": attack.name,
                           "view": view,
                           **summarise(ms.labels, scores, bootstrap=settings.bootstrap, seed=settings.seed),
                           "settings": {"statistic": scored[0].statistic, **extra, **ms.describe(),
                                        "method": ckpt.method, "round": ckpt.round,
                                        **{k: v for k, v in asdict(settings).items()
                                           if k in ("seed", "probes_per_identity", "max_per_class")},
                                        **({"shadows": settings.shadows} if attack.needs_shadows else {})}}
                    records.append(rec)
                    curves.append((record_label(rec), ms.labels, scores))
    files = write_report(out, records, curves)
    return {"records": records, "files": [str(f) for f in files]}
