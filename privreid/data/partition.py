"""Partition protocols: how the training data of one or more domains is split into federated clients.

``by-dataset``
    One client per training domain, holding that domain's whole train split
    (the FedReID benchmark setting: each dataset is one institution).
``by-camera``
    One client per (domain, camera) of the training split, named
    ``"<domain>/c<camid>"`` (0-based camid): each camera is a site that keeps
    its footage.
``by-identity``
    Each training domain's identities are shuffled (deterministically for
    ``seed``) and split into ``num_clients`` disjoint, near-equal groups, *per
    domain*: with several training domains there are ``num_clients`` clients
    per domain, named ``"<domain>/g<i>"``.  All images of one identity go to
    one client.

The privacy protocols of L2RW+ (Jiang et al., paper 003, Sec. III-B and IV-B):

``ci`` (camera independence)
    As ``by-camera``: each camera of each training domain is one client
    (``"<domain>/c<camid>"``), whatever it records; a client gets no
    modality information (its camera may be visible, infrared or both).
``ei`` (entity independence)
    As ``by-dataset``: each training dataset (entity) is one client; at least
    one entity must be held out in ``test_domains`` (the unseen entity).
``es`` (entity sharing)
    The training entities are pooled into one client, named ``"es"``, for
    centralised training (ERM, Eq. 1); identities of different entities
    stay distinct (keyed by (entity, pid)); ``source_pids`` is None.  At least
    one entity must be held out in ``test_domains``.  Its ``domain`` is the
    entity names joined by ``+``.

Every client's pids are relabelled ``0..n-1`` within the client (its
classifier head is local); ``ClientData.source_pids[i]`` records the domain's
train pid of client label ``i``.  Test sets carry their dataset's
``modality``, ``vi_protocol`` and ``tracklets`` (visible-infrared and video
data); clients carry ``tracklets``.  Clients of a video domain get empty
``query`` / ``gallery`` lists (their seen test set, with its tracklets, is
in ``Federation.seen``), because a plain image evaluation cannot read
tracklets.  Leave-one-domain-out is expressed for any protocol
with ``test_domains``: those domains are never trained on and become
``Federation.unseen`` test sets.  ``Federation.seen`` holds one test set per
training domain; the domain's clients carry the very same query/gallery lists.
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
    """Split ``datasets`` (domain name -> dataset) into clients following ``protocol``.

    ``train_domains`` defaults to every domain not in ``test_domains`` (which
    defaults to none), in the order of ``datasets``.  ``num_clients`` is
    required by, and only accepted for, ``by-identity``.  Raises
    :class:`ConfigError` for invalid arguments and :class:`DataError` when a
    client would hold fewer than two identities.
    """
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
