"""A backdoor built to pass a norm bound: constrain-and-scale / projection onto the L2 ball around the global model.

The data are poisoned as by :mod:`.backdoor` (same goals, trigger and threat model); after local training the update
``delta = theta - g`` is projected onto the L2 ball of radius ``bound`` around the global model ``g`` (projected
gradient descent's last projection, Sun et al. 2019, "Can You Really Backdoor Federated Learning?", Sec. 3; Wang et
al. 2020, "Attack of the Tails", Sec. 4, PGD):

    upload = g + delta * min(1, bound / ||delta||_2)

With ``to_bound`` the update is instead scaled *to* the bound, as Bagdasaryan et al. (2020, "How To Backdoor
Federated Learning", Sec. 4.3, train-and-scale) scale by ``gamma = S / ||X - G||`` to pass a norm-bounding server:
``upload = g + delta * bound / ||delta||_2``.

The norm is taken over every floating entry the server transmitted and the client uploads: parameters *and*
BatchNorm running statistics (boosted statistics are what break a model), not the integer ``num_batches_tracked``.
The server's ``norm-bound`` measures the trainable parameters only, so an upload within ``bound`` here passes a server
bound of ``bound`` unclipped.  Deviations: the projection is applied once after local training, not after every local
step as PGD does (the method's client update exposes no per-step hook to an adversary); Bagdasaryan's
constrain-and-scale also adds an anomaly term to the training loss, which is left out (the projection enforces the
bound instead).
"""

from __future__ import annotations

import torch

from privreid.errors import ConfigError
from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.backdoor import Backdoor
from privreid.malicious_clients.updates import floating_update, number


def project_update(ctx, bound: float, to_bound: bool = False) -> float:
    """``ctx.model``'s floating transmitted entries set to ``g + delta * min(1, bound / ||delta||)`` in place
    (``to_bound``: ``g + delta * bound / ||delta||``); returns ``||delta||_2`` before the projection."""
    entries = floating_update(ctx)
    with torch.no_grad():  # the defenses' update_norm is a sibling package's: the layers forbid the import
        norm = float(torch.sqrt(sum(((v - g).double() ** 2).sum() for v, g in entries.values())))
        factor = bound / norm if norm > 0 and (to_bound or norm > bound) else 1.0
        for value, g in entries.values():
            value.copy_(g + factor * (value - g))
    return norm


class ConstrainScale(Backdoor):
    name = "constrain-scale"
    summary = "the backdoor's update projected onto the L2 ball of radius bound around the global model " \
              "(to_bound: scaled to the bound), parameters and BatchNorm statistics"
    options = {**{k: v for k, v in Backdoor.options.items() if k != "boost"}, "bound": 1.0, "to_bound": False}

    def check(self, settings, clients, malicious, config) -> None:
        number(self, settings, "bound")
        if not isinstance(settings["to_bound"], bool):
            raise ConfigError(f"adversary {self.name!r}: to_bound must be true or false (got {settings['to_bound']!r})")
        super().check(settings, clients, malicious, config)

    def poison_upload(self, ctx, settings) -> None:
        project_update(ctx, float(settings["bound"]), settings["to_bound"])


register_malicious_client(ConstrainScale())
