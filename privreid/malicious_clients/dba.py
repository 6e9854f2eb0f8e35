"""The distributed backdoor (DBA, Xie et al. 2020): the trigger split across the malicious clients.

As :mod:`.backdoor` (same options, goals and threat model), but the patch is cut into one horizontal strip per
malicious client (:meth:`Trigger.part <privreid.data.trigger.Trigger.part>`), in the federation's order of the
malicious clients; each stamps only its own strip on its images, so no single upload carries the whole trigger.  The
evaluation stamps the whole patch.  The run records which client stamped which strip (``summary.json``
``adversary.options.parts``: client names, strip 0 first)."""

from __future__ import annotations

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.backdoor import Backdoor
from privreid.data.trigger import Trigger


class DistributedBackdoor(Backdoor):
    name = "dba"
    summary = "the backdoor's trigger split into one strip per malicious client (DBA); each stamps its own strip"

    def check(self, settings, clients, malicious, config) -> None:
        settings["parts"] = [c.name for c in malicious]
        super().check(settings, clients, malicious, config)
        Trigger.from_settings(settings).part(0, len(malicious))  # every strip at least one row

    def trigger(self, settings, client_name: str) -> Trigger:
        parts = settings["parts"]
        return Trigger.from_settings(settings).part(parts.index(client_name), len(parts))


register_malicious_client(DistributedBackdoor())
