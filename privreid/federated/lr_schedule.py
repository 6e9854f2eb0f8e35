"""Learning-rate schedules over rounds: an explicit, named choice of every run (``--lr-schedule``).

A schedule is a multiplier of the configured rates (``--lr-backbone``,
``--lr-head``, ``--lr-neck``) as a function of the round ``r`` (0-based)
and the local epoch ``e`` within it.  ``k`` is ``--lr-step`` and ``gamma``
``--lr-gamma``:

* ``step``: ``gamma ** (r // k)``, a decay every ``k`` rounds.  The prose of paper 004 Sec. 3.5 (FedPav, every 40
  rounds) and paper 000 Sec. 4.2 (SKA, every 40 rounds); privreid's default.
* ``once``: ``1`` before round ``k``, ``gamma`` from round ``k`` on.  The FedReID reference code
  (SunTongtongtong/FedReid ``lib/localUpdate.py``: ``decay_factor = 1.0 if cur_epoch < 20 else 0.1``), which paper 002
  Sec. IV-A words as "decay by 0.1 after 20 global epochs".
* ``local-step``: ``gamma ** ((e + 1) // k)``, restarting every round.  The FedPav reference code (cap-ntu/FedReID
  ``client.py:41-53``) builds a new ``StepLR(step_size=40)`` inside every local ``train()`` and steps it at the start
  of each local epoch (local epoch ``e`` runs after ``e + 1`` steps: the first decay is at ``e = k - 1``); with one
  local epoch and ``k > 1`` the rate never decays (fixture ``tests/reference/fedpav/lr_schedule.json``).
* ``none``: a constant rate.

A method may replace the run's schedule with its own per-step one
(:attr:`privreid.federated.registry.Method.lr_factor`: DPPT's one-cycle);
:func:`lr_table` then reports that method's rate at the start of each round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from privreid.config import RunConfig, lr_neck


@dataclass(frozen=True)
class Schedule:
    """One named schedule: ``factor(config, round_index, local_epoch)`` and a sentence for ``--help`` and dry runs."""

    name: str
    factor: Callable[[RunConfig, int, int], float]
    describe: Callable[[RunConfig], str]
    #: whether the factor changes between the local epochs of one round
    per_epoch: bool = False


def _gamma(config: RunConfig) -> float:
    return config.optim.lr_gamma


SCHEDULES: dict[str, Schedule] = {s.name: s for s in (
    Schedule("step", lambda c, r, e: _gamma(c) ** (r // c.optim.lr_step),
             lambda c: f"x{c.optim.lr_gamma:g} every {c.optim.lr_step} rounds"),
    Schedule("once", lambda c, r, e: 1.0 if r < c.optim.lr_step else _gamma(c),
             lambda c: f"x{c.optim.lr_gamma:g} once, from round {c.optim.lr_step + 1} on"),
    Schedule("local-step", lambda c, r, e: _gamma(c) ** ((e + 1) // c.optim.lr_step),
             lambda c: f"x{c.optim.lr_gamma:g} every {c.optim.lr_step} local epochs, restarting every round",
             per_epoch=True),
    Schedule("none", lambda c, r, e: 1.0, lambda c: "constant"),
)}


def get_schedule(config: RunConfig) -> Schedule:
    """The run's :class:`Schedule` (``optim.lr_schedule``; validated by :meth:`RunConfig.validate`)."""
    return SCHEDULES[config.optim.lr_schedule]


def lr_factor(config: RunConfig, round_index: int, local_epoch: int = 0) -> float:
    """The multiplier of the configured rates in round ``round_index`` (0-based), local epoch ``local_epoch``."""
    return get_schedule(config).factor(config, round_index, local_epoch)


def base_rates(config: RunConfig) -> dict[str, float]:
    """The configured rate of each learning-rate group of :class:`~privreid.federated.client.SupervisedUpdate`.

    ``backbone`` (every trainable parameter not in another group), ``head``
    (the identity classifier) and, when ``--lr-neck`` is given, ``neck``
    (otherwise the neck trains with the backbone).
    """
    rates = {"backbone": config.optim.lr_backbone, "head": config.optim.lr_head}
    if config.optim.lr_neck is not None:
        rates["neck"] = lr_neck(config)
    return rates


def lr_table(config: RunConfig, method) -> dict[str, list[float]]:
    """Group name -> its learning rate in every round (at the round's first step), ``federation.rounds`` values each.

    ``method``'s own factor (:attr:`~privreid.federated.registry.Method.lr_factor`)
    replaces the run's schedule where it declares one.
    """
    own = method.lr_factor

    def factor(round_index: int) -> float:
        replaced = None if own is None else own(config, round_index)
        return lr_factor(config, round_index) if replaced is None else replaced

    factors = [factor(r) for r in range(config.federation.rounds)]
    return {group: [rate * f for f in factors] for group, rate in base_rates(config).items()}
