"""Label flipping: the malicious client trains with every identity label moved to the next one (a derangement of
its labels, so no image keeps its own identity)."""

from __future__ import annotations

import dataclasses

from privreid.errors import ConfigError
from privreid.malicious_clients import Adversary, register_malicious_client


class LabelFlip(Adversary):
    name = "label-flip"
    summary = "identity labels permuted on the malicious clients (label i trains as i + 1 mod n)"

    def check(self, settings, clients, malicious, config) -> None:
        for c in malicious:
            if c.num_classes < 2:
                raise ConfigError(f"adversary 'label-flip': client {c.name} has {c.num_classes} identity; "
                                  "flipping needs two")

    def poison_client(self, client, settings, config):
        n = client.num_classes
        return dataclasses.replace(client, train=[(path, (pid + 1) % n, cam) for path, pid, cam in client.train])


register_malicious_client(LabelFlip())
