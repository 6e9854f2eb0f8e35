"""Privacy accounting with Opacus' Rényi-DP accountant.

Every privreid guarantee is an (epsilon, delta) bound for a composition of Poisson-subsampled Gaussian mechanisms:
``steps`` applications, each sampling every element (an image for DP-SGD, a client for client-level DP) with
probability ``q`` and adding Gaussian noise of ``z`` times the clipping bound.  The bound is Opacus' RDP accounting
(the analysis behind :class:`~opacus.accountants.RDPAccountant`: Mironov, "Rényi Differential Privacy", CSF 2017;
Mironov, Talwar & Zhang, "Rényi Differential Privacy of the Sampled Gaussian Mechanism", 2019) with the
RDP-to-(epsilon, delta) conversion of Balle et al. (AISTATS 2020) that Opacus implements, under the add/remove-one
neighbouring relation.  RDP composes additively and is linear in the number of steps, so privreid computes the
per-step RDP of each ``(q, z)`` once (memoised; the fractional orders' series are the slow part) and sums ``steps``
times it over the history, which is what ``RDPAccountant.get_epsilon`` computes.

Orders.  :data:`ORDERS` is the order grid of Google's ``dp-accounting`` ``RdpAccountant`` (Opacus' default plus 11,
128, 256, 512 and 1024): the large orders tighten small-epsilon (high-noise) bounds, where Opacus' default grid stops
at 63.  With the same grid the two libraries agree to 1e-3 or better (mostly about 1e-7) for epsilon up to about 5 (a
test checks several settings).  Above, where the best order is a small fraction, they drift apart by up to about 1e-3
relative (dp-accounting's fractional-order series gives the larger value, and it skips orders whose series does not
converge); where the bound is close to 0, dp-accounting's conversion reports 0.  Both are valid upper bounds.

Per-client state.  :class:`ClientAccountant` keeps the accountant's history, rows ``(noise multiplier, sample rate,
steps)``, as a float64 tensor in a client's memory (``ClientContext.memory``, private to the client, which plans its
noise from it); the DP-SGD client update also reports it in ``Upload.reports``, from which the server's privacy
ledger keeps its own record.  The engine checkpoints both: epsilon after ``--resume`` equals an uninterrupted run's.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import torch
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis import rdp as rdp_analysis
from opacus.accountants.utils import get_noise_multiplier

from privreid.errors import ConfigError

#: RDP orders: dp-accounting's default grid (a superset of Opacus' default)
ORDERS: list[float] = sorted(set(RDPAccountant.DEFAULT_ALPHAS) | {11, 128, 256, 512, 1024})

#: precision of :func:`noise_for_epsilon` (Opacus' default): the planned
#: epsilon lies in ``(target - EPSILON_TOLERANCE, target]``
EPSILON_TOLERANCE = 0.01

History = list[tuple[float, float, int]]


@functools.lru_cache(maxsize=1024)
def rdp_per_step(sample_rate: float, noise_multiplier: float) -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian step at every order of :data:`ORDERS` (read-only array)."""
    rdp = np.asarray(rdp_analysis.compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=1,
                                              orders=ORDERS), dtype=np.float64)
    rdp.setflags(write=False)
    return rdp


def epsilon_of(history: History, delta: float) -> float:
    """Epsilon of a composition ``[(z, q, steps), ...]`` at ``delta`` (0 for an empty history)."""
    if not history:
        return 0.0
    rdp = sum(int(n) * rdp_per_step(float(q), float(z)) for z, q, n in history)
    with warnings.catch_warnings():  # "optimal order is the largest alpha": the grid's edge, bound still valid
        warnings.simplefilter("ignore", UserWarning)
        eps, _ = rdp_analysis.get_privacy_spent(orders=ORDERS, rdp=rdp, delta=delta)
    return float(eps)


def epsilon(sample_rate: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """Epsilon after ``steps`` Poisson-subsampled Gaussian steps of rate ``q`` and noise multiplier ``z``."""
    return epsilon_of([(noise_multiplier, sample_rate, steps)], delta)


def epsilon_floor(delta: float) -> float:
    """The smallest epsilon RDP accounting on :data:`ORDERS` can certify at ``delta``, whatever the noise.

    Balle et al.'s conversion with zero Rényi divergence:
    ``min_a  log((a - 1) / a) - (log(delta) + log(a)) / (a - 1)``.
    """
    return min(math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1) for a in ORDERS)


@functools.lru_cache(maxsize=256)
def noise_for_epsilon(target_epsilon: float, sample_rate: float, steps: int, delta: float) -> float:
    """The smallest noise multiplier (to :data:`EPSILON_TOLERANCE`) keeping ``steps`` steps within ``target_epsilon``.

    Opacus' bisection (:func:`opacus.accountants.utils.get_noise_multiplier`)
    on :data:`ORDERS`, memoised (the engine plans every client before
    training and again at its first round).  Raises :class:`ConfigError` when no noise reaches the
    target: epsilon cannot go below :func:`epsilon_floor` (about
    ``log(1/delta) / 1023``), whatever the noise.
    """
    if steps <= 0:
        raise ConfigError(f"cannot plan noise for {steps} steps")
    floor = epsilon_floor(delta)
    if target_epsilon <= floor:
        raise ConfigError(f"target epsilon {target_epsilon:g} is unreachable at delta {delta:g}: RDP accounting "
                          f"cannot certify less than {floor:.3g} whatever the noise; raise --target-epsilon "
                          "or --delta")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta,
                                              sample_rate=sample_rate, steps=steps, accountant="rdp",
                                              epsilon_tolerance=EPSILON_TOLERANCE, alphas=ORDERS))
        except ValueError:  # Opacus gave up at noise multiplier 1e6
            raise ConfigError(f"target epsilon {target_epsilon:g} is unreachable at delta {delta:g} for {steps} "
                              f"steps at sample rate {sample_rate:.3g} (noise multipliers up to 1e6 do not reach "
                              "it); raise --target-epsilon or --delta") from None


class ClientAccountant:
    """One client's RDP history, persisted in its memory under ``key``."""

    def __init__(self, history: History | None = None):
        self.history: History = list(history or [])

    @classmethod
    def from_memory(cls, memory: dict, key: str) -> "ClientAccountant":
        rows = memory.get(key)
        if rows is None:
            return cls()
        return cls([(float(z), float(q), int(n)) for z, q, n in rows.tolist()])

    def save(self, memory: dict, key: str) -> None:
        memory[key] = torch.tensor(self.history, dtype=torch.float64).reshape(-1, 3)

    @property
    def steps(self) -> int:
        return sum(n for _, _, n in self.history)

    def step(self, noise_multiplier: float, sample_rate: float, steps: int = 1) -> None:
        """Record ``steps`` steps; consecutive steps with the same ``(z, q)`` share a row (as Opacus does)."""
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            z, q, n = self.history[-1]
            self.history[-1] = (z, q, n + steps)
        else:
            self.history.append((noise_multiplier, sample_rate, steps))

    def epsilon(self, delta: float) -> float:
        return epsilon_of(self.history, delta)

    def epsilon_after(self, noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
        """Epsilon if ``steps`` more steps were taken (the budget check before a round)."""
        return epsilon_of(self.history + [(noise_multiplier, sample_rate, steps)], delta)
