"""``centralized``, a non-federated baseline as a method of the same engine (ERM; the ES protocol of L2RW+).

All clients' training data pooled in one place and trained as a single
client, one epoch per round.  Identities of clients carved from one domain
are merged back (see :func:`pool_clients`).
"""

from __future__ import annotations

from privreid.data.types import ClientData
from privreid.federated.client import SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.federated.registry import Method, register
from privreid.federated.strategy import DataVolumeAverage


def pool_clients(clients: list[ClientData]) -> list[ClientData]:
    """Merge clients into one, keeping identities of different domains apart.

    Identities are keyed by ``(domain, original image pid)``: clients carved
    from the same domain (by camera) share identities, clients of different
    domains never do.  Labels are re-numbered ``0..n-1``.
    """
    keyed = []
    for c in clients:
        for path, pid, camid in c.train:
            keyed.append((path, (c.domain, c.domain_pid(pid)), camid))
    labels = {key: i for i, key in enumerate(sorted({k for _, k, _ in keyed}, key=repr))}
    train = [(path, labels[key], camid) for path, key, camid in keyed]
    domains = sorted({c.domain for c in clients})
    return [ClientData(name="central", domain="+".join(domains), train=train)]


register(
    Method(
        name="centralized",
        dp_sgd_support="yes",
        summary="centralised ERM over the union of the clients' data (ES protocol)",
        policy=CLASSIFIER_LOCAL,
        make_client_update=SupervisedUpdate,
        make_strategy=lambda config, model_config: DataVolumeAverage(),
        communicates=False,
        prepare_clients=pool_clients,
    )
)
