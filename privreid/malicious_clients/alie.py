"""ALIE, "A little is enough" (Baruch et al., NeurIPS 2019): every malicious client uploads the benign mean
shifted by ``z`` standard deviations, coordinate-wise, too little for a robust rule to single it out.

Sec. 3 of the paper: with ``n`` clients of which ``m`` malicious, ``s = floor(n/2 + 1) - m`` benign clients must
side with the attackers, and ``z_max = max_z (Phi(z) < (n - s) / n)``, i.e. ``z = Phi^-1((n - s) / n)``
(:func:`scipy.stats.norm.ppf`); the malicious update is ``mu_j - z * sigma_j`` for every coordinate ``j``
(``mu``, ``sigma``: the mean and standard deviation of the benign updates; with ``knowledge`` = ``partial``, of the
malicious clients' own honest updates, as the paper's attacker estimates them).  ``n`` and ``m`` are the round's.
Option ``z`` fixes it instead.  Deviation: with a malicious majority in a round (``s <= 0``: ``z`` infinite) ``s``
is taken as 1.
"""

from __future__ import annotations

from scipy.stats import norm

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.updates import RoundAttack, mean_std, number


def z_max(n: int, m: int) -> float:
    """Baruch et al.'s ``z_max`` for ``m`` malicious clients among ``n`` (``s`` at least 1)."""
    s = max(1, n // 2 + 1 - m)
    return float(norm.ppf((n - s) / n))


class ALIE(RoundAttack):
    name = "alie"
    summary = "a little is enough (Baruch et al. 2019): the benign mean minus z standard deviations, coordinate-wise"
    options = {**RoundAttack.options, "z": None}
    deviation = "with a malicious majority in a round (s <= 0, z infinite) ALIE takes s = 1"

    def check(self, settings, clients, malicious, config) -> None:
        super().check(settings, clients, malicious, config)
        if settings["z"] is not None:
            number(self, settings, "z", lambda z: True, "be a number")

    def craft(self, reference, full, n, m, settings, rng):
        mean, std = mean_std(reference)
        return mean - (z_max(n, m) if settings["z"] is None else float(settings["z"])) * std


register_malicious_client(ALIE())
