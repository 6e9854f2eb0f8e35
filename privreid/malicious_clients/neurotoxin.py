"""Neurotoxin (Zhang et al., ICML 2022, "Neurotoxin: Durable Backdoors in Federated Learning", Algorithm 1): the
backdoor's update kept off the coordinates the benign clients change most, so that their updates do not erase it.

The data are poisoned as by :mod:`.backdoor` (same goals, trigger and threat model).  The benign update is estimated
by the last global update ``u = g_t - g_prev`` (``g_t`` the global model the client receives now, ``g_prev`` the one
it received at its previous participation, kept in its private memory: one copy of the transmitted model); the mask
``M`` is 0 on the top ``ratio`` share of the coordinates by ``|u|`` (``floor(ratio * n)`` of all ``n`` floating
transmitted entries together, parameters and BatchNorm running statistics; ties by position) and 1 elsewhere, and
the upload is

    upload = g_t + M * (theta - g_t)

Deviations: the paper projects the *gradient* onto the mask at every local step (``grad <- grad * M``); the method's
client update exposes no per-step hook to an adversary, so the mask is applied once to the update after local
training (with momentum and weight decay the two differ).  At the client's first participation there is no previous
global model: nothing is masked.  The paper's code (``gradmask_ratio`` 0.95: the 95% smallest coordinates kept)
gives the default ``ratio`` 0.05; its L2 projection (PGD) is :mod:`.constrain_scale`'s, not combined here.
"""

from __future__ import annotations

import torch

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.backdoor import Backdoor
from privreid.malicious_clients.updates import floating_update, number

#: the client-memory prefix of the global model it received at its previous participation
PREVIOUS = "neurotoxin.previous_global."


def neurotoxin_mask(update: dict[str, torch.Tensor], ratio: float) -> dict[str, torch.Tensor]:
    """``key -> M``: 0 on the ``floor(ratio * n)`` coordinates of largest ``|update|`` over all entries together
    (ties: the first in key order, then flat index), 1 elsewhere; each ``M`` shaped as its entry."""
    flat = torch.cat([u.detach().double().abs().flatten().cpu() for u in update.values()])
    keep = torch.ones_like(flat)
    keep[torch.argsort(flat, descending=True, stable=True)[:int(ratio * flat.numel())]] = 0
    masks, start = {}, 0
    for key, u in update.items():
        masks[key] = keep[start:start + u.numel()].view(u.shape)
        start += u.numel()
    return masks


class Neurotoxin(Backdoor):
    name = "neurotoxin"
    summary = "the backdoor's update masked off the top ratio of coordinates of the last global update (durable)"
    options = {**{k: v for k, v in Backdoor.options.items() if k != "boost"}, "ratio": 0.05}

    def check(self, settings, clients, malicious, config) -> None:
        number(self, settings, "ratio", lambda r: 0 <= r < 1, "lie in [0, 1)")
        super().check(settings, clients, malicious, config)

    def poison_upload(self, ctx, settings) -> None:
        entries = floating_update(ctx)
        previous = {k: ctx.memory.get(PREVIOUS + k) for k in entries}
        if all(p is not None for p in previous.values()):
            masks = neurotoxin_mask({k: g - previous[k].to(g.device, g.dtype) for k, (_, g) in entries.items()},
                                    float(settings["ratio"]))
            with torch.no_grad():
                for key, (value, g) in entries.items():
                    value.copy_(g + masks[key].to(value.device, value.dtype) * (value - g))
        ctx.memory.update({PREVIOUS + k: g.detach().cpu().clone() for k, (_, g) in entries.items()})


register_malicious_client(Neurotoxin())
