"""The composition root of a training run: a :class:`~privreid.config.RunConfig` resolved once into objects.

This is the one place that looks a method up by name (:func:`method_of`) and composes ``apply_defenses(method)``
with the adversary (:func:`build_run`); every other module receives the resolved
:class:`~privreid.federated.registry.Method` (or the fact it needs) as an argument.  The engine receives a
:class:`RunPlan` and never names a defense, an adversary or a recipe deviation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from privreid.config import DP_SGD_TRIPLET, RunConfig
from privreid.data.types import ClientData
from privreid.errors import ConfigError
from privreid.federated.registry import Method, get_method


@dataclass(frozen=True)
class RunPlan:
    """What the engine runs: ``method``, ``observers(clients, clients_per_round)`` and ``deviations``.

    A round observer has ``key`` (its ``summary.json`` entry), ``notes`` (logged when the run starts),
    ``on_upload(upload)`` (every upload the server receives), ``before_round(round_index, selected) -> stop reason
    or None``, ``on_round_result(round_no, result)`` (the round's aggregate, a
    :class:`~privreid.federated.strategy.RoundResult`), ``after_round(round_no) -> metrics records``, ``state_dict()``
    / ``load_state_dict(state)`` (checkpointed) and ``summary(metrics, stopped)``.  Observers never see client
    memory.  ``deviations``: ``summary.json``'s (:func:`privreid.deviations.deviations`)."""

    method: Method
    observers: Callable[[list[ClientData], int], list[Any]]
    deviations: list[str]


def method_of(config: RunConfig) -> Method:
    """``config``'s registered method (``--method NAME``); ConfigError naming the registered ones otherwise."""
    return get_method(config.federation.method)


def build_method(config: RunConfig) -> Method:
    """``config``'s method wrapped by its defenses; ConfigError for unknown names, refusals and unknown options."""
    from privreid.defenses import apply_defenses

    method = method_of(config)
    if config.privacy.dp_sgd and method.triplet_weight_for(config) > 0:  # the method's default (the flag: validate)
        raise ConfigError(DP_SGD_TRIPLET)
    method = apply_defenses(method, config)
    method.check_options(config)
    return method


def build_run(config: RunConfig) -> RunPlan:
    """The method of :func:`build_method` and the privacy ledger as the round observer; with ``--adversary``, the
    malicious clients' update poisoned and the attack's record as a second observer (:mod:`privreid.malicious_clients`)."""
    from privreid.defenses import privacy_observers
    from privreid.deviations import deviations
    from privreid.malicious_clients import adversary_plan

    method = build_method(config)
    attack = adversary_plan(config)
    if attack is None:
        return RunPlan(method, lambda clients, m: privacy_observers(config, clients, m), deviations(config, method))
    return RunPlan(attack.wrap(method), lambda clients, m: [*privacy_observers(config, clients, m),
                                                            attack.observer(clients)], deviations(config, method))
