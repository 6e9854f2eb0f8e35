"""Min-Max (Shejwalkar & Houmansadr, NDSS 2021, the AGR-agnostic attack): the malicious update is
``mean + gamma * p`` with the largest ``gamma`` whose largest squared distance to a benign update stays within the
largest between two benign updates (their Min-Max objective,
``argmax_gamma max_i ||m - b_i||^2 <= max_{i,j} ||b_i - b_j||^2``).

``p`` (option ``perturbation``): ``unit``, the unit vector of ``-mean``; ``std``, ``-std``; ``sign``,
``-sign(mean)`` (the paper's inverse unit vector, inverse standard deviation and inverse sign).  ``gamma`` is
found by the paper's halving search (their Algorithm 1: from ``gamma`` (10), the step halves until two candidates
differ by at most ``tolerance``); it stays below twice the initial ``gamma``.  ``knowledge`` = ``partial``: the
malicious clients' own honest updates stand for the benign ones.  All malicious clients upload the same update.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from privreid.errors import ConfigError
from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.updates import RoundAttack, mean_std, number

PERTURBATIONS = ("unit", "std", "sign")


def largest_gamma(ok: Callable[[float], bool], gamma: float, tolerance: float) -> float:
    """Shejwalkar & Houmansadr's Algorithm 1: the largest ``gamma`` found with ``ok(gamma)`` (0 when none)."""
    step, good = gamma, 0.0
    while abs(good - gamma) > tolerance:
        if ok(gamma):
            good, gamma = gamma, gamma + step / 2
        else:
            gamma -= step / 2
        step /= 2
    return good


def squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``||a_i - b_j||^2`` for every row pair, without the matrix-product shortcut (exact in float64)."""
    return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist") ** 2


class MinMax(RoundAttack):
    name = "min-max"
    summary = "Min-Max (Shejwalkar & Houmansadr 2021): mean + gamma * perturbation, no farther from any benign " \
              "update than the benign ones are from each other"
    options = {**RoundAttack.options, "perturbation": "unit", "gamma": 10.0, "tolerance": 1e-5}

    def check(self, settings, clients, malicious, config) -> None:
        super().check(settings, clients, malicious, config)
        if settings["perturbation"] not in PERTURBATIONS:
            raise ConfigError(f"adversary {self.name!r}: perturbation must be one of {', '.join(PERTURBATIONS)} "
                              f"(got {settings['perturbation']!r})")
        number(self, settings, "gamma")
        number(self, settings, "tolerance")

    def bound(self, benign: torch.Tensor) -> torch.Tensor:
        """Of the benign updates' squared distances (a matrix): the largest one."""
        return benign.max()

    def score(self, distances: torch.Tensor) -> torch.Tensor:
        """Of the malicious update's squared distances to the benign ones (a vector): the largest one."""
        return distances.max()

    def craft(self, reference, full, n, m, settings, rng):
        mean = reference.mean(0)
        p = {"unit": lambda: -mean / mean.norm().clamp_min(torch.finfo(mean.dtype).tiny),
             "std": lambda: -mean_std(reference)[1],
             "sign": lambda: -mean.sign()}[settings["perturbation"]]()
        bound = self.bound(squared_distances(reference, reference))
        # ||mean + g p - b_i||^2 = a_i + 2 g c_i + g^2 q: each step of the search costs n numbers, not n models
        diff = mean - reference
        a, c, q = diff.square().sum(1), diff @ p, p.square().sum()
        gamma = largest_gamma(lambda g: bool(self.score(a + 2 * g * c + g * g * q) <= bound),
                              float(settings["gamma"]), float(settings["tolerance"]))
        return mean + gamma * p


register_malicious_client(MinMax())
