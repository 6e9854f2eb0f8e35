"""Partition protocols: invariants of the clients each protocol builds, and every error path."""

import pytest

from privreid.data import PROTOCOLS, ReIDDataset, make_federation, relabel
from privreid.errors import ConfigError, DataError


def make_ds(name: str, num_pids: int, num_cams: int, per_cam: int = 2, pid_offset: int = 0) -> ReIDDataset:
    """Every training pid has ``per_cam`` images in every camera; train pids are 0..num_pids-1."""
    train = [
        (f"/{name}/train/{pid:04d}_c{cam + 1}_{i}.jpg", pid, cam)
        for pid in range(num_pids)
        for cam in range(num_cams)
        for i in range(per_cam)
    ]
    query = [(f"/{name}/query/{pid:04d}.jpg", pid, 0) for pid in range(pid_offset, pid_offset + 3)]
    gallery = [(f"/{name}/gallery/{pid:04d}.jpg", pid, 1) for pid in range(pid_offset, pid_offset + 5)]
    return ReIDDataset(name=name, train=train, query=query, gallery=gallery)


@pytest.fixture
def domains():
    return {"A": make_ds("A", 10, 3), "B": make_ds("B", 7, 2), "C": make_ds("C", 5, 2)}


def original(client, ds):
    """The client's samples with the domain's pids back (paths are unique per sample)."""
    by_path = {path: (path, pid, cam) for path, pid, cam in ds.train}
    return [by_path[path] for path, _, _ in client.train]


def assert_local_labels(client, ds):
    """Client pids are 0..n-1 and ``source_pids`` maps them back to the domain's train pids."""
    assert sorted({pid for _, pid, _ in client.train}) == list(range(client.num_classes))
    assert len(client.source_pids) == client.num_classes
    domain_pid = {path: pid for path, pid, _ in ds.train}
    assert all(client.source_pids[pid] == domain_pid[path] for path, pid, _ in client.train)


def test_relabel():
    samples = [("a", 7, 0), ("b", 3, 1), ("c", 7, 2), ("d", 10, 0)]
    assert relabel(samples) == [("a", 1, 0), ("b", 0, 1), ("c", 1, 2), ("d", 2, 0)]


def test_by_dataset(domains):
    fed = make_federation(domains, "by-dataset")
    assert fed.protocol == "by-dataset" and fed.unseen == []
    assert [(c.name, c.domain) for c in fed.clients] == [("A", "A"), ("B", "B"), ("C", "C")]
    for client in fed.clients:
        ds = domains[client.domain]
        assert client.train == ds.train
        assert client.source_pids == list(range(ds.num_train_pids))
        assert client.query is ds.query and client.gallery is ds.gallery
    assert [(t.name, t.query, t.gallery) for t in fed.seen] == [(d, ds.query, ds.gallery) for d, ds in domains.items()]


def test_leave_one_domain_out(domains):
    for protocol, kwargs in (("by-dataset", {}), ("by-camera", {}), ("by-identity", {"num_clients": 2})):
        fed = make_federation(domains, protocol, test_domains=["B"], **kwargs)
        assert {c.domain for c in fed.clients} == {"A", "C"}
        assert [t.name for t in fed.seen] == ["A", "C"]
        assert [(t.name, t.query, t.gallery) for t in fed.unseen] == [("B", domains["B"].query, domains["B"].gallery)]
    fed = make_federation(domains, "by-dataset", train_domains=["C"], test_domains="A")
    assert [c.name for c in fed.clients] == ["C"] and [t.name for t in fed.unseen] == ["A"]


def test_by_camera(domains):
    fed = make_federation(domains, "by-camera", train_domains=["A", "B"])
    assert [c.name for c in fed.clients] == ["A/c0", "A/c1", "A/c2", "B/c0", "B/c1"]
    for domain in ("A", "B"):
        clients = [c for c in fed.clients if c.domain == domain]
        ds = domains[domain]
        for client in clients:
            assert {cam for _, _, cam in client.train} == {int(client.name.split("/c")[1])}
            assert_local_labels(client, ds)
            assert client.query is ds.query and client.gallery is ds.gallery
        union = [s for c in clients for s in original(c, ds)]
        assert sorted(union) == sorted(ds.train)


def test_by_camera_relabels_within_client():
    ds = ReIDDataset("D", train=[("a", 0, 0), ("b", 1, 0), ("c", 5, 1), ("d", 9, 1)], query=[], gallery=[])
    fed = make_federation({"D": ds}, "by-camera")
    assert [c.train for c in fed.clients] == [[("a", 0, 0), ("b", 1, 0)], [("c", 0, 1), ("d", 1, 1)]]
    assert [c.source_pids for c in fed.clients] == [[0, 1], [5, 9]]


def test_by_identity(domains):
    fed = make_federation(domains, "by-identity", num_clients=3, train_domains=["A", "B"], seed=4)
    assert [c.name for c in fed.clients] == ["A/g0", "A/g1", "A/g2", "B/g0", "B/g1", "B/g2"]
    for domain in ("A", "B"):
        ds = domains[domain]
        clients = [c for c in fed.clients if c.domain == domain]
        pid_sets = [{pid for _, pid, _ in original(c, ds)} for c in clients]
        assert sum(len(s) for s in pid_sets) == len(set().union(*pid_sets)) == ds.num_train_pids  # disjoint, complete
        assert max(map(len, pid_sets)) - min(map(len, pid_sets)) <= 1  # balanced
        for client in clients:
            assert_local_labels(client, ds)
        assert sorted(s for c in clients for s in original(c, ds)) == sorted(ds.train)


def test_by_identity_is_deterministic_per_seed(domains):
    def groups(seed, **kwargs):
        fed = make_federation(domains, "by-identity", num_clients=2, seed=seed, **kwargs)
        return {c.name: [path for path, _, _ in c.train] for c in fed.clients}

    assert groups(0) == groups(0)
    assert groups(0) != groups(1)
    # A domain's split does not depend on which other domains are trained.
    assert {k: v for k, v in groups(3).items() if k.startswith("A/")} == groups(3, train_domains=["A"])


def test_unknown_protocol(domains):
    with pytest.raises(ConfigError, match="by-dataset, by-camera, by-identity"):
        make_federation(domains, "by-hospital")
    assert PROTOCOLS == ("by-dataset", "by-camera", "by-identity", "ci", "ei", "es")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"train_domains": ["A", "X"]}, "train_domains: unknown domains X"),
        ({"test_domains": ["Y"]}, "test_domains: unknown domains Y"),
        ({"train_domains": ["A", "B"], "test_domains": ["B"]}, "B are in both"),
        ({"train_domains": ["A", "A"]}, "lists a domain twice"),
        ({"test_domains": ["A", "B", "C"]}, "no training domain"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"num_clients": 2}, "only applies to the by-identity"),
    ],
)
def test_config_errors(domains, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_federation(domains, "by-dataset", **kwargs)


def test_no_datasets():
    with pytest.raises(ConfigError, match="at least one dataset"):
        make_federation({}, "by-dataset")


@pytest.mark.parametrize("num_clients", [None, 0, -2])
def test_by_identity_needs_num_clients(domains, num_clients):
    with pytest.raises(ConfigError, match="num_clients >= 1"):
        make_federation(domains, "by-identity", num_clients=num_clients)


def test_more_clients_than_identities(domains):
    with pytest.raises(ConfigError, match="num_clients=6 exceeds the 5 training identities of domain C"):
        make_federation(domains, "by-identity", num_clients=6, train_domains=["B", "C"])


def test_by_identity_client_with_one_identity(domains):
    # C has 5 identities: 3 clients get 2, 2 and 1.
    with pytest.raises(DataError, match="client C/g2 would hold 1 identity"):
        make_federation(domains, "by-identity", num_clients=3, train_domains=["C"])


def test_by_camera_client_with_one_identity():
    ds = ReIDDataset("D", train=[("a", 0, 0), ("b", 1, 0), ("c", 1, 1)], query=[], gallery=[])
    with pytest.raises(DataError, match="client D/c1 would hold 1 identity"):
        make_federation({"D": ds}, "by-camera")


def test_by_dataset_client_with_one_identity():
    ds = ReIDDataset("D", train=[("a", 0, 0), ("b", 0, 1)], query=[], gallery=[])
    with pytest.raises(DataError, match="client D would hold 1 identity"):
        make_federation({"D": ds}, "by-dataset")
