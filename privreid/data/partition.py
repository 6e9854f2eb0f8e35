"""Partition protocols: how the training data of one or more domains is split into federated clients.

``by-dataset``: one client per training domain (the FedReID benchmark: each dataset one institution).
``by-camera``: one client per (domain, camera), ``"<domain>/c<camid>"`` (0-based). ``by-identity``: each
domain's identities shuffled (seeded) into ``num_clients`` disjoint near-equal groups per domain,
``"<domain>/g<i>"``; all images of an identity in one client.

L2RW+'s privacy protocols (Jiang et al., paper 003, Sec. III-B, IV-B): ``ci`` (camera independence) as
``by-camera``, with no modality information per client; ``ei`` (entity independence) as ``by-dataset``, at
least one entity held out in ``test_domains``; ``es`` (entity sharing) pools the training entities into one
client ``"es"`` for centralised ERM (Eq. 1), identities keyed by (entity, pid), ``source_pids`` None, domain the
entity names joined by ``+``, at least one entity held out.

Every client's pids are relabelled ``0..n-1`` (its head is local); ``ClientData.source_pids[i]`` is the domain's
train pid of label ``i``. Test sets carry ``modality``, ``vi_protocol`` and ``tracklets``; clients
``tracklets``. Clients of a video domain get empty ``query`` / ``gallery`` (their test set is in
``Federation.seen``: a plain image evaluation cannot read tracklets). ``test_domains`` are never trained on and
become ``Federation.unseen``; ``Federation.seen`` has one test set per training domain, shared by its clients.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

import numpy as np

from privreid.config import PROTOCOLS  # noqa: F401  (re-exported: the partitions this module makes)
from privreid.errors import ConfigError, DataError
from privreid.data.types import ClientData, Federation, ReIDDataset, Sample, TestSet, relabel

#: protocols evaluated on an entity held out of training
_UNSEEN_REQUIRED = ("ei", "es")

__all__ = ["PROTOCOLS", "make_federation", "relabel", "as_test_set"]


def make_federation(
    datasets: Mapping[str, ReIDDataset],
    protocol: str,
    *,
    train_domains: str | Iterable[str] | None = None,
    test_domains: str | Iterable[str] | None = None,
    num_clients: int | None = None,
    seed: int = 0,
) -> Federation:
    """Split ``datasets`` (domain -> dataset) into clients following ``protocol``. ``train_domains``: every
    domain not in ``test_domains``, in order; ``num_clients``: for ``by-identity`` only. ConfigError for invalid
    arguments, DataError for a client with fewer than two identities."""
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown partition protocol {protocol!r}; choose one of: {', '.join(PROTOCOLS)}")
    if not datasets:
        raise ConfigError("make_federation needs at least one dataset")
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    test = _domain_list(datasets, test_domains or [], "test_domains")
    if train_domains is None:
        train = [domain for domain in datasets if domain not in test]
    else:
        train = _domain_list(datasets, train_domains, "train_domains")
    overlap = [domain for domain in train if domain in test]
    if overlap:
        raise ConfigError(f"domains {', '.join(overlap)} are in both train_domains and test_domains")
    if not train:
        raise ConfigError("no training domain: every domain is in test_domains")
    if protocol in _UNSEEN_REQUIRED and not test:
        raise ConfigError(f"the {protocol} protocol tests on an unseen entity: hold one out with test_domains")
    if protocol == "by-identity":
        if num_clients is None or num_clients < 1:
            raise ConfigError(f"by-identity needs num_clients >= 1, got {num_clients}")
        for domain in train:
            num_pids = datasets[domain].num_train_pids
            if num_clients > num_pids:
                raise ConfigError(
                    f"num_clients={num_clients} exceeds the {num_pids} training identities of domain {domain}"
                )
    elif num_clients is not None:
        raise ConfigError(f"num_clients only applies to the by-identity protocol, not to {protocol}")

    clients = [_pooled_client(datasets, train)] if protocol == "es" else []
    for domain in train if protocol != "es" else []:
        ds = datasets[domain]
        if protocol in ("by-dataset", "ei"):
            groups = [(domain, ds.train)]
        elif protocol in ("by-camera", "ci"):
            groups = _split_by_camera(domain, ds.train)
        else:
            groups = _split_by_identity(domain, ds.train, num_clients, seed)
        video = ds.tracklets is not None
        for name, samples in groups:
            clients.append(ClientData(
                name=name,
                domain=domain,
                train=relabel(samples),
                query=[] if video else ds.query,
                gallery=[] if video else ds.gallery,
                source_pids=sorted({pid for _, pid, _ in samples}),  # relabel's order: label i <- source_pids[i]
                tracklets=ds.tracklets,
            ))
    for client in clients:
        if client.num_classes < 2:
            raise DataError(
                f"client {client.name} would hold {client.num_classes} identity; a ReID client needs at least two"
            )
    seen = [as_test_set(domain, datasets[domain]) for domain in train]
    unseen = [as_test_set(domain, datasets[domain]) for domain in test]
    return Federation(protocol=protocol, clients=clients, seen=seen, unseen=unseen)


def as_test_set(name: str, ds: ReIDDataset) -> TestSet:
    """``ds``'s query/gallery split as a :class:`TestSet` named ``name``, with its VI / video side mappings."""
    return TestSet(name, ds.query, ds.gallery, modality=ds.modality, vi_protocol=ds.vi_protocol,
                   tracklets=ds.tracklets)


def _pooled_client(datasets: Mapping[str, ReIDDataset], domains: list[str]) -> ClientData:
    """The ES client: every training entity's samples, identities keyed by (entity, pid) and relabelled."""
    keyed = [(path, (domain, pid), cam) for domain in domains for path, pid, cam in datasets[domain].train]
    tracks = [datasets[domain].tracklets for domain in domains]
    merged = None if all(t is None for t in tracks) else {k: v for t in tracks if t for k, v in t.items()}
    return ClientData(name="es", domain="+".join(domains), train=relabel(keyed), tracklets=merged)


def _domain_list(datasets: Mapping[str, ReIDDataset], domains: str | Iterable[str], arg: str) -> list[str]:
    domains = [domains] if isinstance(domains, str) else list(domains)
    unknown = [domain for domain in domains if domain not in datasets]
    if unknown:
        raise ConfigError(f"{arg}: unknown domains {', '.join(unknown)}; known: {', '.join(datasets)}")
    if len(set(domains)) != len(domains):
        raise ConfigError(f"{arg} lists a domain twice: {', '.join(domains)}")
    return domains


def _split_by_camera(domain: str, samples: list[Sample]) -> list[tuple[str, list[Sample]]]:
    cams = sorted({camid for _, _, camid in samples})
    return [(f"{domain}/c{cam}", [s for s in samples if s[2] == cam]) for cam in cams]


def _split_by_identity(domain: str, samples: list[Sample], num_clients: int, seed: int) -> list[tuple[str, list[Sample]]]:
    pids = sorted({pid for _, pid, _ in samples})
    # Seeded per domain (by name) so a domain's split does not depend on which other domains train.
    rng = np.random.default_rng([seed, zlib.crc32(domain.encode("utf-8"))])
    groups = np.array_split(rng.permutation(pids), num_clients)
    owner = {int(pid): i for i, group in enumerate(groups) for pid in group}
    return [(f"{domain}/g{i}", [s for s in samples if owner[s[1]] == i]) for i in range(num_clients)]
