"""Poisoning adversaries among the clients: a registry, one module per attack.

``--adversary NAME --malicious-clients K`` (or client names; the config's ``robustness.adversary = {"name": NAME,
"malicious": K, **options}``, options also through ``--set robustness.adversary.OPTION=VALUE``) makes ``K`` clients (the
last ``K`` of the federation, or the named ones) run the attack.  An attack acts only through what a client may send:

* :meth:`Adversary.poison_client`: the data the malicious client trains on, rewritten once when the engine prepares
  its clients, so a rewrite that adds a local class sizes the client's classifier (label flipping, :mod:`.label_flip`;
  a retrieval backdoor, :mod:`.backdoor`, and its distributed form, :mod:`.dba`, stamping a trigger, :mod:`.trigger`);
* :meth:`Adversary.poison_upload`: the model it uploads, rewritten after local training from the model it trained and
  what the server transmitted (sign flipping, :mod:`.sign_flip`; scaled updates / model replacement, :mod:`.scaled`);
* :meth:`Adversary.poison_round`: the malicious uploads of a round rewritten together, by colluding attackers that
  know the round's benign updates (:mod:`.updates` ``RoundAttack``: :mod:`.alie`, :mod:`.ipm`, :mod:`.min_max`,
  :mod:`.min_sum`, :mod:`.fang`), at the server before any defense sees them (:mod:`.collusion`).

When and which clients attack: :mod:`.threat_model` (``rounds``, ``every``, ``draw``).

The wrapped client update is the method's own, so the engine's upload contract (the policy's shared keys) and the
privacy gate stay in force; the server's defenses see the malicious uploads like any other.  :class:`AdversaryRecord`
checks the settings against the federation before anything is written and, as a round observer, records in
``summary.json`` (``adversary``) which clients were malicious and with what, and how the server's defenses detected
them (:mod:`.detection`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from privreid.config import RunConfig
from privreid.data.types import ClientData
from privreid.errors import ConfigError
from privreid.federated.policy import StateDict
from privreid.federated.registry import Method
from privreid.registry import Registry
from privreid.seeding import derive_seed
from privreid.malicious_clients.collusion import RewriteRound
from privreid.malicious_clients.detection import detection_record, detection_totals
from privreid.malicious_clients.threat_model import THREAT_MODEL, ThreatModel, threat_model


class Adversary:
    """One attack; subclass it and override what it poisons (default: nothing)."""

    #: registry key (``--adversary NAME``)
    name: str = ""
    #: one line for reports
    summary: str = ""
    #: options and their defaults (``robustness.adversary[option]``)
    options: Mapping[str, Any] = {}

    def check(self, settings: dict[str, Any], clients: list[ClientData], malicious: list[ClientData],
              config: RunConfig) -> None:
        """ConfigError for options this federation cannot run with (before anything is written); it may fill in
        ``settings`` the defaults that depend on the data (then recorded in ``summary.json``)."""

    def poison_client(self, client: ClientData, settings: Mapping[str, Any], config: RunConfig) -> ClientData:
        """The data the malicious ``client`` trains on (``config``: the run's, e.g. its input size)."""
        return client

    def dormant_client(self, poisoned: ClientData, original: ClientData, settings: Mapping[str, Any]) -> ClientData:
        """The data a malicious client whose data :meth:`poison_client` made ``poisoned`` trains on in a round it does
        not attack (``robustness.adversary.rounds`` / ``every``): ``original``, its own data, by default.  It must keep
        ``poisoned``'s classes (the client's head keeps its size across rounds): a run whose dormant data would not
        is refused in one line."""
        return original

    def poison_upload(self, ctx, settings: Mapping[str, Any]) -> None:
        """Rewrite the trained model ``ctx.model`` in place before it is uploaded (``ctx.global_state``: what the
        server transmitted)."""

    def round_records(self, round_no: int, model, testsets, settings: Mapping[str, Any], **evaluation) -> list:
        """``metrics.jsonl`` records of the attack's success on the global ``model`` at an evaluated round."""
        return []

    def outcome(self, metrics: list, settings: Mapping[str, Any]) -> dict[str, Any]:
        """``summary.json`` entries the attack reads from the run's ``metrics`` records."""
        return {}

    def poison_round(self, global_state: StateDict, malicious: list[StateDict], benign: list[StateDict],
                     settings: Mapping[str, Any], rng: torch.Generator) -> list[StateDict]:
        """The uploads of the round's attacking clients (``malicious``, as they trained honestly) rewritten
        knowing the round's ``benign`` uploads and the server's ``global_state``; ``rng``: the round's adversary
        stream.  Overriding it places the attack at the server (:mod:`.collusion`), outermost around the defenses."""
        raise NotImplementedError


def poisons_data(adversary: Adversary) -> bool:
    """Whether ``adversary`` rewrites its clients' data (overrides :meth:`Adversary.poison_client`)."""
    return type(adversary).poison_client is not Adversary.poison_client


def acts_on_rounds(adversary: Adversary) -> bool:
    """Whether ``adversary`` rewrites a round's uploads together (overrides :meth:`Adversary.poison_round`)."""
    return type(adversary).poison_round is not Adversary.poison_round


#: every attack by name; the built-ins (one module each) register when first used
MALICIOUS_CLIENTS: Registry[Adversary] = Registry("adversary", builtins=(
    "privreid.malicious_clients.label_flip", "privreid.malicious_clients.sign_flip", "privreid.malicious_clients.scaled",
    "privreid.malicious_clients.backdoor", "privreid.malicious_clients.dba",
    "privreid.malicious_clients.constrain_scale", "privreid.malicious_clients.neurotoxin",
    "privreid.malicious_clients.alie", "privreid.malicious_clients.ipm", "privreid.malicious_clients.min_max",
    "privreid.malicious_clients.min_sum", "privreid.malicious_clients.fang"))


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
    """The run's attack and its options (defaults filled in; the threat model's, :mod:`.threat_model`, as given), or
    None; ConfigError for unknown names or options."""
    given = dict(config.robustness.adversary)
    if not given:
        return None
    if "name" not in given:
        raise ConfigError("robustness.adversary needs a name (--adversary NAME)")
    adversary = get_malicious_client(str(given.pop("name")))
    malicious = given.pop("malicious", 1)
    known = {*adversary.options, *THREAT_MODEL}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(f"adversary {adversary.name!r} has no option {', '.join(unknown)} (its options: "
                          f"{', '.join(sorted(known))})")
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
    """A round observer: checks the attack against the federation (at construction), knows which clients attack in
    the round, turns the defenses' selection records into detection records (:mod:`.detection`) and states the
    attack in ``summary.json``."""

    key = "adversary"

    def __init__(self, adversary: Adversary, settings: dict[str, Any], clients: list[ClientData], config: RunConfig):
        malicious = malicious_clients(settings["malicious"], clients)
        self.threat = threat_model(settings, clients, malicious, config.federation.rounds, config.runtime.seed,
                                   adversary.name, poisons_data(adversary))
        adversary.check(settings, clients, malicious, config)
        self.adversary, self.settings = adversary, settings
        self.malicious = (sorted(set().union(*map(self.threat.malicious_in, range(config.federation.rounds))))
                          if self.threat.draw == "per-round" else [c.name for c in malicious])
        self.notes = [f"adversary {adversary.name} on {', '.join(self.malicious)}: {adversary.summary}"]
        #: the current round (0-based) and its selected clients that attack (:meth:`before_round`)
        self.round_index, self.attacking = 0, frozenset()
        self.detections: list[dict[str, Any]] = []

    def on_upload(self, upload) -> None:
        pass

    def before_round(self, round_index, selected) -> None:
        self.round_index = round_index
        self.attacking = self.threat.malicious_in(round_index) & {c.name for c in selected}

    def on_round_result(self, round_no, result) -> None:
        self.detections = [detection_record(round_no, rec, self.attacking) for rec in result.records
                           if rec.get("scope") == "defense"]

    def after_round(self, round_no) -> list:
        out, self.detections = self.detections, []
        return out

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state) -> None:
        pass

    def on_global_model(self, round_no, model, testsets, **evaluation) -> list:
        """The round evaluation's hook (:mod:`privreid.federated.round_eval`): the attack's records."""
        return self.adversary.round_records(round_no, model, testsets, self.settings, **evaluation)

    def summary(self, metrics, stopped=None) -> dict[str, Any]:
        options = {k: v for k, v in self.settings.items() if k != "malicious" and k not in THREAT_MODEL}
        return {"attack": self.adversary.name, "summary": self.adversary.summary, "malicious_clients": self.malicious,
                "options": options, "threat_model": self.threat.record(), "detection": detection_totals(metrics),
                **self.adversary.outcome(metrics, self.settings)}


class MaliciousUpdate:
    """The method's client update; on a client that attacks this round (whose data is already poisoned) it poisons
    the upload."""

    def __init__(self, inner, plan: AdversaryPlan):
        self.inner, self.plan = inner, plan

    def __call__(self, ctx):
        attacking = ctx.client.name in self.plan.threat().malicious_in(ctx.round)
        poisoned = ctx.client
        if not attacking:  # a malicious client outside its attack rounds trains on its dormant data
            ctx.client = self.plan.dormant.get(poisoned.name, poisoned)
        try:
            metrics = self.inner(ctx)
        finally:
            ctx.client = poisoned
        if attacking:
            self.plan.adversary.poison_upload(ctx, self.plan.settings)
        return metrics


class AdversaryPlan:
    """The run's attack: :meth:`wrap` the method (its clients' data and update, and for an attack on the round's
    uploads its server strategy), :meth:`observer` for the engine."""

    def __init__(self, adversary: Adversary, settings: dict[str, Any], config: RunConfig):
        #: the attack's options; :meth:`observer` fills in those that depend on the data, before any training
        self.adversary, self.settings, self.config = adversary, settings, config
        #: filled when the engine prepares its clients (:meth:`poisoned`), before any training; ``dormant``: the data
        #: a malicious client whose data is poisoned trains on outside its attack rounds
        self.malicious: set[str] = set()
        self.dormant: dict[str, ClientData] = {}
        self.record: AdversaryRecord | None = None

    def threat(self) -> ThreatModel:
        assert self.record is not None, "the engine prepares its clients before training them"
        return self.record.threat

    def wrap(self, method: Method) -> Method:
        """``method`` whose malicious clients train on poisoned data and poison their uploads; an attack on the
        round's uploads (:func:`acts_on_rounds`) rewrites them outermost around the server's strategy."""
        if not method.communicates:
            raise ConfigError(f"--adversary needs a federated method; {method.name!r} has no clients that upload")
        make = method.make_client_update
        wrapped = dataclasses.replace(
            method, make_client_update=lambda config: MaliciousUpdate(make(config), self),
            make_prepare_clients=lambda config: lambda clients: self.poisoned(method.prepare_clients_for(config),
                                                                              clients))
        if not acts_on_rounds(self.adversary):
            return wrapped
        return dataclasses.replace(wrapped, make_strategy=lambda config, model_config: RewriteRound(
            method.make_strategy(config, model_config), self.rewrite_round))

    def rewrite_round(self, global_state: StateDict, uploads: list) -> list:
        """The round's ``uploads`` with those of the attacking clients rewritten by :meth:`Adversary.poison_round`
        (the round's adversary stream seeded from the run's seed and the round)."""
        record = self.record
        attacking = [u for u in uploads if u.client in record.attacking]
        if not attacking:
            if record.attacking:
                raise ValueError(f"adversary {self.adversary.name!r}: the server received no upload of the clients "
                                 f"that attack this round ({', '.join(sorted(record.attacking))})")
            return uploads
        benign = [u.state for u in uploads if u.client not in record.attacking]
        rng = torch.Generator().manual_seed(derive_seed(self.config.runtime.seed, "adversary", record.round_index))
        states = self.adversary.poison_round(global_state, [u.state for u in attacking], benign, self.settings, rng)
        rewritten = {u.client: dataclasses.replace(u, state=s) for u, s in zip(attacking, states)}
        return [rewritten.get(u.client, u) for u in uploads]

    def poisoned(self, prepare, clients: list[ClientData]) -> list[ClientData]:
        """The attack checked against the federation's ``clients``, the malicious ones' data poisoned, then the
        method's ``prepare`` (if any: e.g. DPPT's global relabelling sees the poisoned labels)."""
        self.record = AdversaryRecord(self.adversary, self.settings, clients, self.config)
        self.malicious.update(self.record.malicious)
        originals = {c.name: c for c in clients}
        clients = [self.adversary.poison_client(c, self.settings, self.config) if c.name in self.malicious else c
                   for c in clients]
        if poisons_data(self.adversary) and not self.record.threat.every_round(self.config.federation.rounds):
            for client in (c for c in clients if c.name in self.malicious):
                dormant = self.adversary.dormant_client(client, originals[client.name], self.settings)
                if dormant.num_classes != client.num_classes:
                    raise ConfigError(f"adversary {self.adversary.name!r} cannot stay dormant outside its attack "
                                      f"rounds here: without its poisoned images {client.name} would lose a class "
                                      "of its head (rounds and every apply to targeted backdoors, label flipping "
                                      "and attacks on the uploads)")
                self.dormant[client.name] = dormant
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
