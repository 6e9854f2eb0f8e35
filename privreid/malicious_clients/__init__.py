"""Poisoning adversaries among the clients (issue 30): a registry, one module per attack.

``--adversary NAME --malicious-clients K`` (or client names; the config's
``train.adversary = {"name": NAME, "malicious": K, **options}``, options also
through ``--set train.adversary.OPTION=VALUE``) makes ``K`` clients (the last
``K`` of the federation, or the named ones) run the attack.  An attack acts
only through what a client may send:

* :meth:`Adversary.poison_client`: the data the malicious client trains on,
  rewritten once when the engine prepares its clients, so a rewrite that adds
  a local class sizes the client's classifier (label flipping,
  :mod:`.label_flip`; a retrieval backdoor, :mod:`.backdoor`, and its
  distributed form, :mod:`.dba`, stamping a trigger, :mod:`.trigger`);
* :meth:`Adversary.poison_upload`: the model it uploads, rewritten after its
  local training from the model it trained and what the server transmitted
  (sign flipping, :mod:`.sign_flip`; scaled updates / model replacement,
  :mod:`.scaled`).

The wrapped client update is the method's own, so the engine's upload
contract (the policy's shared keys) and the privacy gate stay in force; the
server's defenses see the malicious uploads like any other.
:class:`AdversaryRecord` checks the settings against the federation before
anything is written (as the engine prepares its clients) and, as a round
observer of the engine, records in ``summary.json`` (``adversary``) which
clients were malicious and with what.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from privreid.config import RunConfig
from privreid.data.types import ClientData
from privreid.errors import ConfigError
from privreid.federated.registry import Method
from privreid.registry import Registry


class Adversary:
    """One attack; subclass it and override what it poisons (default: nothing)."""

    #: registry key (``--adversary NAME``)
    name: str = ""
    #: one line for reports
    summary: str = ""
    #: options and their defaults (``train.adversary[option]``)
    options: Mapping[str, Any] = {}

    def check(self, settings: dict[str, Any], clients: list[ClientData], malicious: list[ClientData],
              config: RunConfig) -> None:
        """ConfigError for options this federation cannot run with (before anything is written); it may fill in
        ``settings`` the defaults that depend on the data (then recorded in ``summary.json``)."""

    def poison_client(self, client: ClientData, settings: Mapping[str, Any], config: RunConfig) -> ClientData:
        """The data the malicious ``client`` trains on (``config``: the run's, e.g. its input size)."""
        return client

    def poison_upload(self, ctx, settings: Mapping[str, Any]) -> None:
        """Rewrite the trained model ``ctx.model`` in place before it is uploaded (``ctx.global_state``: what the
        server transmitted)."""

    def round_records(self, round_no: int, model, testsets, settings: Mapping[str, Any], **evaluation) -> list:
        """``metrics.jsonl`` records of the attack's success on the global ``model`` at an evaluated round."""
        return []

    def outcome(self, metrics: list, settings: Mapping[str, Any]) -> dict[str, Any]:
        """``summary.json`` entries the attack reads from the run's ``metrics`` records."""
        return {}


#: every attack by name; the built-ins (one module each) register when first used
MALICIOUS_CLIENTS: Registry[Adversary] = Registry("adversary", builtins=(
    "privreid.malicious_clients.label_flip", "privreid.malicious_clients.sign_flip", "privreid.malicious_clients.scaled",
    "privreid.malicious_clients.backdoor", "privreid.malicious_clients.dba",
    "privreid.malicious_clients.constrain_scale", "privreid.malicious_clients.neurotoxin"))


def register_malicious_client(adversary: Adversary) -> Adversary:
    """Add ``adversary`` under its name (``--adversary NAME``); ConfigError when the name is empty or taken."""
    return MALICIOUS_CLIENTS.register(adversary)


def available_malicious_clients() -> list[str]:
    """The registered attacks' names, sorted."""
    return sorted(MALICIOUS_CLIENTS.names())


def get_malicious_client(name: str) -> Adversary:
    """The attack ``name``; an unknown name is a one-line ConfigError listing the known ones (sorted)."""
    if name not in MALICIOUS_CLIENTS:
        raise MALICIOUS_CLIENTS.unknown(name, available_malicious_clients())
    return MALICIOUS_CLIENTS.get(name)


def settings_of(config: RunConfig) -> tuple[Adversary, dict[str, Any]] | None:
    """The run's attack and its options (defaults filled in), or None; ConfigError for unknown names or options."""
    given = dict(config.train.adversary)
    if not given:
        return None
    if "name" not in given:
        raise ConfigError("train.adversary needs a name (--adversary NAME)")
    adversary = get_malicious_client(str(given.pop("name")))
    malicious = given.pop("malicious", 1)
    unknown = sorted(set(given) - set(adversary.options))
    if unknown:
        raise ConfigError(f"adversary {adversary.name!r} has no option {', '.join(unknown)} (its options: "
                          f"{', '.join(sorted(adversary.options)) or 'none'})")
    return adversary, {**adversary.options, **given, "malicious": malicious}


def malicious_clients(malicious: Any, clients: list[ClientData]) -> list[ClientData]:
    """The malicious clients: the last ``K`` of the federation for a count ``K``, else the named ones."""
    names = [c.name for c in clients]
    if isinstance(malicious, str):
        malicious = [m for m in malicious.split(",") if m]
    if isinstance(malicious, bool) or not isinstance(malicious, (int, list)):
        raise ConfigError(f"--malicious-clients takes a count or client names (got {malicious!r})")
    if isinstance(malicious, int):
        if not 1 <= malicious <= len(clients):
            raise ConfigError(f"--malicious-clients {malicious}: the federation has {len(clients)} clients "
                              f"(give 1 to {len(clients)})")
        return clients[len(clients) - malicious:]
    unknown = [m for m in malicious if m not in names]
    if unknown or not malicious:
        raise ConfigError(f"--malicious-clients: no client named {', '.join(map(str, unknown)) or '(none given)'} "
                          f"(clients: {', '.join(names)})")
    return [c for c in clients if c.name in malicious]


class AdversaryRecord:
    """A round observer: checks the attack against the federation (at construction) and states it in ``summary.json``."""

    key = "adversary"

    def __init__(self, adversary: Adversary, settings: dict[str, Any], clients: list[ClientData], config: RunConfig):
        malicious = malicious_clients(settings["malicious"], clients)
        adversary.check(settings, clients, malicious, config)
        self.adversary, self.settings = adversary, settings
        self.malicious = [c.name for c in malicious]
        self.notes = [f"adversary {adversary.name} on {', '.join(self.malicious)}: {adversary.summary}"]

    def on_upload(self, upload) -> None:
        pass

    def before_round(self, round_index, selected) -> None:
        return None

    def after_round(self, round_no) -> list:
        return []

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state) -> None:
        pass

    def state_from_memories(self, memories) -> dict:
        return {}

    def on_global_model(self, round_no, model, testsets, **evaluation) -> list:
        """The round evaluation's hook (:mod:`privreid.federated.round_eval`): the attack's records."""
        return self.adversary.round_records(round_no, model, testsets, self.settings, **evaluation)

    def summary(self, metrics, stopped=None) -> dict[str, Any]:
        options = {k: v for k, v in self.settings.items() if k != "malicious"}
        return {"attack": self.adversary.name, "summary": self.adversary.summary, "malicious_clients": self.malicious,
                "options": options, **self.adversary.outcome(metrics, self.settings)}


class MaliciousUpdate:
    """The method's client update; on a malicious client (whose data is already poisoned) it poisons the upload."""

    def __init__(self, inner, adversary: Adversary, settings: dict[str, Any], malicious: set[str]):
        self.inner, self.adversary, self.settings, self.malicious = inner, adversary, settings, malicious

    def __call__(self, ctx):
        if ctx.client.name not in self.malicious:
            return self.inner(ctx)
        metrics = self.inner(ctx)
        self.adversary.poison_upload(ctx, self.settings)
        return metrics


class AdversaryPlan:
    """The run's attack: :meth:`wrap` the method (its clients' data and update), :meth:`observer` for the engine."""

    def __init__(self, adversary: Adversary, settings: dict[str, Any], config: RunConfig):
        #: the attack's options; :meth:`observer` fills in those that depend on the data, before any training
        self.adversary, self.settings, self.config = adversary, settings, config
        #: filled when the engine prepares its clients (:meth:`poisoned`), before any training
        self.malicious: set[str] = set()
        self.record: AdversaryRecord | None = None

    def wrap(self, method: Method) -> Method:
        """``method`` whose malicious clients train on poisoned data and poison their uploads."""
        if not method.communicates:
            raise ConfigError(f"--adversary needs a federated method; {method.name!r} has no clients that upload")
        make = method.make_client_update
        return dataclasses.replace(
            method, make_client_update=lambda config: MaliciousUpdate(make(config), self.adversary, self.settings,
                                                                      self.malicious),
            make_prepare_clients=lambda config: lambda clients: self.poisoned(method.prepare_clients_for(config),
                                                                              clients))

    def poisoned(self, prepare, clients: list[ClientData]) -> list[ClientData]:
        """The attack checked against the federation's ``clients``, the malicious ones' data poisoned, then the
        method's ``prepare`` (if any: e.g. DPPT's global relabelling sees the poisoned labels)."""
        self.record = AdversaryRecord(self.adversary, self.settings, clients, self.config)
        self.malicious.update(self.record.malicious)
        clients = [self.adversary.poison_client(c, self.settings, self.config) if c.name in self.malicious else c
                   for c in clients]
        return prepare(clients) if prepare else clients

    def observer(self, clients: list[ClientData]) -> AdversaryRecord:
        """The attack's record, made by :meth:`poisoned` (the engine prepares its clients before its observers)."""
        assert self.record is not None, "the engine asks for observers after preparing its clients"
        return self.record


def adversary_plan(config: RunConfig) -> AdversaryPlan | None:
    """The attack ``config`` asks for, or None."""
    found = settings_of(config)
    return None if found is None else AdversaryPlan(*found, config)


__all__ = ["MALICIOUS_CLIENTS", "Adversary", "AdversaryPlan", "AdversaryRecord", "adversary_plan",
           "available_malicious_clients", "get_malicious_client", "register_malicious_client"]
