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

Every client's pids are relabelled ``0..n-1`` within the client (its
classifier head is local); ``ClientData.source_pids[i]`` records the domain's
train pid of client label ``i``.  Leave-one-domain-out is expressed for any protocol
with ``test_domains``: those domains are never trained on and become
``Federation.unseen`` test sets.  ``Federation.seen`` holds one test set per
training domain; the domain's clients carry the very same query/gallery lists.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

import numpy as np

from privreid.errors import ConfigError, DataError
from privreid.data.types import ClientData, Federation, ReIDDataset, Sample, TestSet, relabel

PROTOCOLS = ("by-dataset", "by-camera", "by-identity")

__all__ = ["PROTOCOLS", "make_federation", "relabel"]


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

    clients = []
    for domain in train:
        ds = datasets[domain]
        if protocol == "by-dataset":
            groups = [(domain, ds.train)]
        elif protocol == "by-camera":
            groups = _split_by_camera(domain, ds.train)
        else:
            groups = _split_by_identity(domain, ds.train, num_clients, seed)
        for name, samples in groups:
            client = ClientData(
                name=name,
                domain=domain,
                train=relabel(samples),
                query=ds.query,
                gallery=ds.gallery,
                source_pids=sorted({pid for _, pid, _ in samples}),  # relabel's order: label i <- source_pids[i]
            )
            if client.num_classes < 2:
                raise DataError(
                    f"client {name} would hold {client.num_classes} identity; a ReID client needs at least two"
                )
            clients.append(client)
    seen = [TestSet(domain, datasets[domain].query, datasets[domain].gallery) for domain in train]
    unseen = [TestSet(domain, datasets[domain].query, datasets[domain].gallery) for domain in test]
    return Federation(protocol=protocol, clients=clients, seen=seen, unseen=unseen)


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
