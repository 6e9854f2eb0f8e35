"""Fang et al. (USENIX Security 2020), the attack on trimmed mean and median: every malicious coordinate is pushed
against ``s_j``, the sign of the benign mean update's coordinate ``j`` (the direction the global model would move).

``knowledge`` = ``full`` (their full-knowledge trim attack, Sec. 4.2): with ``w_max,j`` / ``w_min,j`` the largest /
smallest benign value, a malicious client's coordinate is drawn uniformly from ``[w_max,j, b * w_max,j]``
(``w_max,j > 0``) or ``[w_max,j, w_max,j / b]`` (``<= 0``) where ``s_j = -1``, and from ``[w_min,j / b, w_min,j]``
(``w_min,j > 0``) or ``[b * w_min,j, w_min,j]`` (``<= 0``) where ``s_j = 1`` (and ``s_j = 0``); option ``b`` (2,
the paper's).  ``partial`` (their partial knowledge): ``mu_j`` and ``sigma_j`` from the malicious clients' own
honest updates, the draw from ``[mu_j + 3 sigma_j, mu_j + 4 sigma_j]`` (``s_j = -1``, with ``s`` from ``mu``) or
``[mu_j - 4 sigma_j, mu_j - 3 sigma_j]``.  Deviation: the rule acts on updates ``theta - g`` (the paper: on the
local models' parameters), drawn per malicious client from the round's adversary stream.
"""

from __future__ import annotations

import torch

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.updates import RoundAttack, mean_std, number


class Fang(RoundAttack):
    name = "fang"
    summary = "Fang et al. 2020: each coordinate pushed beyond the benign extremes, against the benign direction"
    options = {**RoundAttack.options, "b": 2.0}
    deviation = "Fang et al.'s rule acts on updates (upload - global), the paper's on local model parameters"

    def check(self, settings, clients, malicious, config) -> None:
        super().check(settings, clients, malicious, config)
        number(self, settings, "b", lambda b: b > 1, "be a number > 1")

    def craft(self, reference, full, n, m, settings, rng):
        mean, std = mean_std(reference)
        u = torch.rand((m, reference.shape[1]), generator=rng, dtype=torch.float64)
        if full:
            b, hi, lo = float(settings["b"]), reference.amax(0), reference.amin(0)
            above = (hi, torch.where(hi > 0, b * hi, hi / b))
            below = (torch.where(lo > 0, lo / b, b * lo), lo)
        else:
            above, below = (mean + 3 * std, mean + 4 * std), (mean - 4 * std, mean - 3 * std)
        low, high = (torch.where(mean < 0, a, z) for a, z in zip(above, below))
        return low + u * (high - low)


register_malicious_client(Fang())
