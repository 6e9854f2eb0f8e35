"""IPM, inner-product manipulation (Xie, Koyejo & Gupta, UAI 2020, "Fall of empires"): every malicious client
uploads ``-epsilon * mean`` of the benign updates, so the aggregate's inner product with the true update turns
negative (their Sec. 4: ``u_i = -epsilon / (n - q) * sum_j v_j`` over the ``n - q`` benign updates ``v_j``).
``knowledge`` = ``partial``: the mean of the malicious clients' own honest updates.  Xie et al. choose a small
``epsilon`` against Krum-like rules and a large one against the mean; default 0.5.
"""

from __future__ import annotations

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.updates import RoundAttack, number


class IPM(RoundAttack):
    name = "ipm"
    summary = "inner-product manipulation (Xie et al. 2020): uploads -epsilon times the benign mean update"
    options = {**RoundAttack.options, "epsilon": 0.5}

    def check(self, settings, clients, malicious, config) -> None:
        super().check(settings, clients, malicious, config)
        number(self, settings, "epsilon")

    def craft(self, reference, full, n, m, settings, rng):
        return -float(settings["epsilon"]) * reference.mean(0)


register_malicious_client(IPM())
