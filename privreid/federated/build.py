"""The composition root of a run: the configured method with its defenses, and the engine's round observers.

This is the one place that composes ``apply_defenses(get_method(...))``:
the engine receives a :class:`RunPlan` from a builder (by default
:func:`build_run`) and never names a defense.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from privreid.config import RunConfig
from privreid.data.types import ClientData
from privreid.federated.registry import Method, get_method


@dataclass(frozen=True)
class RunPlan:
    """What the engine runs: ``method`` and ``observers(clients, clients_per_round)``.

    A round observer has ``key`` (its ``summary.json`` entry), ``notes``
    (logged when the run starts), ``on_upload(upload)`` (every upload the
    server receives), ``before_round(round_index, selected) -> stop reason or
    None``, ``after_round(round_no) -> metrics records``, ``state_dict()`` /
    ``load_state_dict(state)`` (checkpointed), ``state_from_memories(memories)``
    (restoring a checkpoint written before observers kept state) and
    ``summary(metrics, stopped)``.  Observers never see client memory.
    """

    method: Method
    observers: Callable[[list[ClientData], int], list[Any]]


def build_method(config: RunConfig) -> Method:
    """``config``'s method wrapped by its defenses; ConfigError for unknown names, refusals and unknown options."""
    from privreid.defenses import apply_defenses

    method = apply_defenses(get_method(config.train.method), config)
    method.check_options(config)
    return method


def build_run(config: RunConfig) -> RunPlan:
    """The method of :func:`build_method` and the privacy ledger as the round observer; with ``--adversary``, the
    malicious clients' update poisoned and the attack's record as a second observer (:mod:`privreid.malicious_clients`)."""
    from privreid.malicious_clients import adversary_plan
    from privreid.defenses import privacy_observers

    attack = adversary_plan(config)
    if attack is None:
        return RunPlan(build_method(config), lambda clients, m: privacy_observers(config, clients, m))
    return RunPlan(attack.wrap(build_method(config)),
                   lambda clients, m: [*privacy_observers(config, clients, m), attack.observer(clients)])
