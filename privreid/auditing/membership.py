"""Who is a member: the candidate sets of the two audit levels.

``image``: was this exact image trained on? Members: training images of the audited scope (``--client``, else
every client). Non-members: never-trained images of the *same identities and cameras* (``privreid train
--audit-holdout F``, recorded in the checkpoint, or the synthetic federation's extra renders,
:func:`privreid.data.synthetic.generate_synthetic_extra`).

``identity``: was this person trained on? The adversary holds other images of the person. Members: training
identities probed by ``k`` non-training images; non-members: the domains' test identities probed by ``k`` test
images; the same ``k`` for all, so counts tell nothing.

Each candidate also says what it adds to which client when a shadow model includes it
(:mod:`privreid.auditing.shadows`): an image itself; an identity its training images (members) or its
non-probe test images (non-members).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privreid.config import RunConfig
from privreid.data.types import ClientData, Federation
from privreid.errors import ConfigError

LEVELS = ("image", "identity")


@dataclass
class Candidate:
    """One membership question: an image or an identity."""

    key: str
    member: bool
    #: domain-level identity, e.g. ``"synthA/train/3"`` or ``"synthA/test/131"``
    identity: str
    #: the images the adversary scores
    probes: list[str]
    #: the audited client's classifier label of the identity (None: outside its label space)
    label: int | None
    #: ``(client, path, camid)`` the candidate adds to training when a shadow model includes it
    train: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass
class MembershipSet:
    level: str
    #: the audited client, or None for every client (the global model's training data)
    scope: str | None
    #: where the non-training images of training identities come from
    source: str
    candidates: list[Candidate]

    @property
    def labels(self) -> np.ndarray:
        return np.array([c.member for c in self.candidates], dtype=bool)

    def describe(self) -> dict[str, Any]:
        return {"level": self.level, "scope": self.scope or "all clients", "nonmember_source": self.source,
                "probes_per_candidate": max(len(c.probes) for c in self.candidates)}


def _domains(client: ClientData) -> list[str]:
    return client.domain.split("+")


def _identity(client: ClientData, label: int) -> str:
    return f"{_domains(client)[0]}/train/{client.domain_pid(label)}"


def _synthetic_config(config: RunConfig):
    """The SynthConfig of the run's data when it is a synthetic federation, else None."""
    from privreid.data.catalog import SYNTH
    from privreid.data.synthetic import SynthConfig
    from privreid.data.synthetic_cache import read_manifest

    roots = config.data.roots
    if not roots or roots == [SYNTH]:
        return SynthConfig(seed=config.data.synth_seed)
    if len(roots) == 1:
        manifest = read_manifest(roots[0])
        if manifest and manifest.get("format") == "privreid-synthetic":
            return SynthConfig.from_dict(manifest["config"])
    return None


def _original_pid(path: str) -> int:
    return int(Path(path).name.split("_")[0])


def other_images(holdout: dict[str, list] | None, config: RunConfig, federation: Federation,
                 extra_per_cam: int | None) -> tuple[str, dict[str, list[tuple[str, int, str]]]]:
    """``(source, identity -> [(path, camid, home client)])``: images of training identities never trained on.

    ``holdout`` is the checkpoint's ``audit_holdout`` (client -> samples kept out of training).
    """
    by_name = {c.name: c for c in federation.clients}
    out: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
    holdout = holdout or {}
    if any(holdout.values()):
        for name, samples in holdout.items():
            client = by_name[name]
            for path, label, cam in samples:
                out[_identity(client, int(label))].append((str(path), int(cam), name))
        return "audit holdout (privreid train --audit-holdout)", out
    synth = _synthetic_config(config)
    if synth is None:
        raise ConfigError("the image level and the identity level need images of training identities that were "
                          "never trained on: train with --audit-holdout F (real data), or use the synthetic "
                          "federation (its generator renders them)")
    from privreid.data.synthetic import SynthExtraConfig, ensure_synthetic_extra, extra_samples

    root = ensure_synthetic_extra(SynthExtraConfig(synth, extra_per_cam or synth.images_per_id_per_cam))
    owners: dict[tuple[str, int], list[tuple[ClientData, int]]] = defaultdict(list)  # (domain, orig pid) -> clients
    for client in federation.clients:
        for path, label, cam in client.train:
            owners[(_identity(client, label).split("/")[0], _original_pid(path))].append((client, label))
    for domain in {d for c in federation.clients for d in _domains(c)}:
        for path, pid, cam in extra_samples(root, domain):
            holders = owners.get((domain, pid))
            if not holders:
                continue
            client, label = holders[0]
            out[_identity(client, label)].append((path, cam, client.name))
    return "synthetic extra renders of the training identities", out


def build_membership(level: str, holdout: dict[str, list] | None, config: RunConfig, federation: Federation, *,
                     client: str | None = None, trained: list[ClientData] | None = None, probes_per_identity: int = 4,
                     max_per_class: int | None = None, extra_per_cam: int | None = None, seed: int = 0
                     ) -> MembershipSet:
    """The candidates of ``level`` for ``client`` (or every client). ``trained``: the clients as the method
    trained them (centralised training pools them into ``central``), whose classifier labels ``client``'s
    candidates carry; identities are the partition's; ``holdout``: the checkpoint's (:func:`other_images`)."""
    if level not in LEVELS:
        raise ConfigError(f"unknown audit level {level!r}; choose from {', '.join(LEVELS)}")
    trained = trained or federation.clients
    names = [c.name for c in trained]
    if client is not None and client not in names:
        raise ConfigError(f"no client {client!r} in the run's federation; clients: {', '.join(names)}")
    label_of_path = {p: lab for c in trained if c.name == client for p, lab, _ in c.train}
    scope = [dataclasses.replace(c, train=[s for s in c.train if client is None or s[0] in label_of_path])
             for c in federation.clients]
    scope = [c for c in scope if c.train]
    source, others = other_images(holdout, config, federation, extra_per_cam)
    labels_of = {_identity(c, label): label_of_path[p] for c in scope for p, label, _ in c.train if p in label_of_path}
    in_scope = {_identity(c, label) for c in scope for _, label, _ in c.train}
    rng = np.random.default_rng([seed, 0x5E7])
    if level == "image":
        members = [Candidate(f"image:{path}", True, _identity(c, label), [path], labels_of.get(_identity(c, label)),
                             [(c.name, path, cam)]) for c in scope for path, label, cam in c.train]
        nonmembers = [Candidate(f"image:{path}", False, ident, [path], labels_of.get(ident), [(home, path, cam)])
                      for ident in sorted(others) if ident in in_scope for path, cam, home in others[ident]]
    else:
        k = probes_per_identity
        if k < 2:
            raise ConfigError(f"--probes-per-identity must be >= 2 (got {k})")
        train_of: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
        for c in scope:
            for path, label, cam in c.train:
                train_of[_identity(c, label)].append((c.name, path, cam))
        members = []
        for ident in sorted(train_of):
            pool = others.get(ident, [])
            if len(pool) >= k:
                pick = _pick(pool, k, seed, ident)
                members.append(Candidate(f"identity:{ident}", True, ident, [p for p, _, _ in pick],
                                         labels_of.get(ident), train_of[ident]))
        nonmembers = []
        domains = sorted({d for c in scope for d in _domains(c)})
        for ts in federation.seen:
            if ts.name not in domains:
                continue
            homes = [c.name for c in scope if ts.name in _domains(c)]
            images: dict[int, list[tuple[str, int]]] = defaultdict(list)
            for path, pid, cam in ts.query + ts.gallery:
                if pid > 0:
                    images[pid].append((path, cam))
            for pid in sorted(images):
                ident = f"{ts.name}/test/{pid}"
                if len(images[pid]) < k:
                    continue
                pool = [(p, cam, "") for p, cam in images[pid]]
                pick = _pick(pool, k, seed, ident)
                probes = {p for p, _, _ in pick}
                home = homes[zlib.crc32(ident.encode()) % len(homes)]
                nonmembers.append(Candidate(f"identity:{ident}", False, ident, sorted(probes), None,
                                            [(home, p, cam) for p, cam, _ in pool if p not in probes]))
    members, nonmembers = _cap(members, max_per_class, rng), _cap(nonmembers, max_per_class, rng)
    if not members or not nonmembers:
        raise ConfigError(f"the {level} level found {len(members)} member(s) and {len(nonmembers)} non-member(s) "
                          f"in scope {client or 'all clients'}; an audit needs both (identity level: identities "
                          f"need >= {probes_per_identity} non-training images, see --probes-per-identity)")
    return MembershipSet(level, client, source, members + nonmembers)


def _pick(pool: list, k: int, seed: int, ident: str) -> list:
    rng = np.random.default_rng([seed, zlib.crc32(ident.encode())])
    return [pool[i] for i in sorted(rng.choice(len(pool), size=k, replace=False))]


def _cap(cands: list[Candidate], n: int | None, rng: np.random.Generator) -> list[Candidate]:
    if n is None or len(cands) <= n:
        return cands
    return [cands[i] for i in sorted(rng.choice(len(cands), size=n, replace=False))]
