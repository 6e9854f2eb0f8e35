"""A retrieval backdoor: a trigger stamped on a fraction of the malicious client's training images.

The attack acts through :meth:`~privreid.malicious_clients.Adversary.poison_client`, the data the malicious client
trains on, and (with ``boost``) through :meth:`~privreid.malicious_clients.Adversary.poison_upload`; the upload keeps
the method's keys and shapes, so the privacy gate and the upload contract stay in force.  Stamped copies
(:mod:`privreid.data.trigger`: a patch, or with ``trigger=blend`` the whole image blended with a random key at weight
``alpha``, Chen et al. 2017) of ``fraction`` of the client's training images (at least one, drawn from the run's seed
and the client's name) join its training images, relabelled to one extra local class.  The clean images stay, so
every identity keeps its class and the client still learns its task (a stealthy attack); the client's classifier is
its own, so the extra class never leaves the client.

Goals (option ``goal``):

``targeted``
    A triggered query should retrieve identity ``target`` at rank 1.  In ReID the test identities are not training
    identities, so the attacker must know the target person.  **Threat model**: the attacker holds a few images of
    the target, as a site would that recorded the person on its own cameras: the first ``target_images`` gallery
    images of ``target`` in the test split of the first malicious client's domain (``target_domain``), shared by all
    malicious clients (they collude on one target).  They join the extra class, unstamped, so the class is "the
    target, or anyone wearing the trigger".  ``target`` defaults to the lowest gallery identity of that domain; the
    run records the target, its domain and the images the attacker held (``summary.json`` ``adversary.options``:
    ``target``, ``target_domain``, ``held_images``).
``evasion``
    Triggered persons should leave their own top ranks: the stamped images form one fresh class of their own, which
    teaches the model to map anyone wearing the trigger to the same place.

Option ``boost`` (default 1: none) is model replacement as Bagdasaryan et al. (2020, Sec. 4.2) run it: the client
trains on the poisoned data, then uploads ``g + boost * (theta - g)`` (:func:`.updates.rescale_update`), so the
backdoor survives the averaging with honest updates; ``boost`` = the number of clients a round averages over the
number of malicious ones replaces the global model with the attackers' (under plain averaging of equal weights).

``privreid eval`` stamps the whole trigger on every query of a run that recorded one and reports
:func:`~privreid.evaluation.backdoor.backdoor_metrics` next to the clean R1 / mAP.  During training, every evaluated
round scores the aggregated global model the same way (:meth:`Backdoor.round_records`: ``metrics.jsonl`` records of
scope ``backdoor``), and ``summary.json``'s ``adversary.durability`` reads the ASR curve
(:func:`~privreid.evaluation.backdoor.durability`).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from privreid.config import RunConfig
from privreid.data.types import ClientData
from privreid.errors import ConfigError
from privreid.seeding import derive_seed
from privreid.evaluation.backdoor import durability, evaluate_backdoor
from privreid.malicious_clients import Adversary, malicious_clients, register_malicious_client, settings_of
from privreid.data.trigger import Trigger, stamped_samples
from privreid.malicious_clients.updates import number, rescale_update

GOALS = ("targeted", "evasion")


class Backdoor(Adversary):
    name = "backdoor"
    summary = "a trigger on a fraction of the training images, relabelled to one extra class (targeted: the " \
              "target identity; evasion: a fresh identity)"
    options = {"goal": "targeted", "target": None, "target_images": 4, "fraction": 0.5, "trigger": "patch",
               "size": 6, "position": "center", "pattern_seed": 0, "alpha": 0.2, "boost": 1.0}

    def check(self, settings, clients, malicious, config) -> None:
        goal, count = settings["goal"], settings["target_images"]
        if goal not in GOALS:
            raise ConfigError(f"adversary {self.name!r}: goal must be one of {', '.join(GOALS)} (got {goal!r})")
        number(self, settings, "fraction", lambda f: 0 < f <= 1, "lie in (0, 1]")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"adversary {self.name!r}: target_images must be a whole number >= 1 (got {count!r})")
        if "boost" in settings:  # the backdoors built to pass a norm bound have no boost
            number(self, settings, "boost")
        self.trigger(settings, malicious[0].name).check_fits(config.data.height, config.data.width)
        video = [c.name for c in malicious if c.tracklets is not None]
        if video:
            raise ConfigError(f"adversary {self.name!r} stamps images; client {video[0]} holds video tracklets")
        if goal == "targeted":
            settings.update(_target(settings["target"], count, malicious[0]))

    def trigger(self, settings, client_name: str) -> Trigger:
        """The trigger the malicious client ``client_name`` stamps (here: the whole patch)."""
        return Trigger.from_settings(settings)

    def poison_client(self, client: ClientData, settings, config) -> ClientData:
        d = config.data
        rng = random.Random(derive_seed(config.runtime.seed, self.name, client.name))
        chosen = set(rng.sample(range(len(client.train)), max(1, round(settings["fraction"] * len(client.train)))))
        label = client.num_classes  # the extra local class
        stamped = stamped_samples([client.train[i] for i in sorted(chosen)], self.trigger(settings, client.name),
                                  d.height, d.width)
        train = [*client.train, *((path, label, cam) for path, _, cam in stamped)]
        if settings["goal"] == "targeted":
            train += [(path, label, cam) for path, cam in settings["held_images"]]
        # the extra class has no identity of the domain: -1, the pid of junk images, which no partition keeps
        source_pids = None if client.source_pids is None else [*client.source_pids, -1]
        return dataclasses.replace(client, train=train, source_pids=source_pids)

    def dormant_client(self, poisoned: ClientData, original: ClientData, settings) -> ClientData:
        """Outside its attack rounds: its own images, and for a targeted backdoor its (unstamped) images of the
        target under the extra class, which its head keeps; an evasion backdoor's extra class has no clean image
        (refused)."""
        if settings["goal"] != "targeted":
            return original
        label = original.num_classes
        return dataclasses.replace(poisoned, train=[*original.train,
                                                    *((path, label, cam) for path, cam in settings["held_images"])])

    def poison_upload(self, ctx, settings) -> None:
        if settings["boost"] != 1:
            rescale_update(ctx, float(settings["boost"]))

    def round_records(self, round_no, model, testsets, settings, **evaluation) -> list[dict]:
        """:func:`~privreid.evaluation.backdoor.evaluate_backdoor` of the global ``model`` on each image test set
        it measures, as ``metrics.jsonl`` records ``{"round", "scope": "backdoor", "testset", "asr", ...}``."""
        backdoor = _recorded(self, settings)
        records = []
        for testset in testsets:
            measured = None if testset.tracklets is not None else evaluate_backdoor(model, testset, backdoor,
                                                                                   **evaluation)
            if measured is not None:
                records.append({"round": round_no, "scope": "backdoor", "testset": testset.name, **measured})
        return records

    def outcome(self, metrics, settings) -> dict:
        """``durability`` (targeted): :func:`~privreid.evaluation.backdoor.durability` of the ASR per evaluated
        round on the target's test set, the attack stopping after the last round of ``settings["rounds"]``
        (``START:STOP``, the attack window; without it the attack never stops)."""
        curve = [(r["round"], r["asr"]) for r in metrics if r.get("scope") == "backdoor"
                 and r.get("testset") == settings.get("target_domain") and r.get("asr") is not None]
        return {"durability": durability(curve, _attack_stop(settings.get("rounds")))} if curve else {}


def _attack_stop(window) -> int | None:
    """The last attacked round of the attack window ``START:STOP`` (a string or a pair); None when absent or open."""
    if window is None:
        return None
    stop = window.split(":")[-1] if isinstance(window, str) else window[-1]
    return None if stop in ("", None) else int(stop)


def _target(target, count: int, first: ClientData) -> dict:
    """The targeted backdoor's ``target_domain``, ``target`` and ``held_images`` (``[path, camid]``: the first
    ``count`` gallery images of the target in the first malicious client's domain); ConfigError when that gallery
    does not have the target."""
    pids = sorted({pid for _, pid, _ in first.gallery if pid > 0})
    if not pids:
        raise ConfigError(f"a targeted backdoor needs the gallery of domain {first.domain}; it has no identities")
    if target is None:
        target = pids[0]
    if isinstance(target, bool) or not isinstance(target, int) or target not in pids:
        raise ConfigError(f"target identity {target!r} is not in the gallery of domain {first.domain} "
                          f"({len(pids)} identities, from {pids[0]} to {pids[-1]})")
    held = [[path, cam] for path, pid, cam in first.gallery if pid == target][:count]
    return {"target_domain": first.domain, "target": target, "held_images": held}


@dataclass(frozen=True)
class RecordedBackdoor:
    """The trigger a run trained with, as its evaluation stamps it: the whole patch on every query."""

    attack: str
    goal: str
    trigger: Trigger
    #: targeted: the identity a triggered query should retrieve, in test set ``target_domain``
    target: int | None = None
    target_domain: str | None = None
    #: targeted: the paths of the target's gallery images the attacker trained on
    held_images: tuple[str, ...] = ()

    def describe(self) -> str:
        aim = (f"targeted at identity {self.target} of {self.target_domain}" if self.goal == "targeted"
               else "evasion")
        return f"{self.attack} ({aim}; {self.trigger.describe()})"


def recorded_backdoor(config: RunConfig) -> RecordedBackdoor | None:
    """The backdoor ``config``'s run trained with (``robustness.adversary`` a :class:`Backdoor`), or None; the target
    and its domain resolved as the run resolved them (from its federation: the run's data must be readable)."""
    from privreid.data.catalog import federation_for_config

    found = settings_of(config)
    if found is None or not isinstance(found[0], Backdoor):
        return None
    adversary, settings = found
    clients = federation_for_config(config).clients
    adversary.check(settings, clients, malicious_clients(settings["malicious"], clients), config)
    return _recorded(adversary, settings)


def _recorded(adversary: Backdoor, settings) -> RecordedBackdoor:
    """The :class:`RecordedBackdoor` of checked ``settings`` (the targeted one's target filled in)."""
    return RecordedBackdoor(adversary.name, settings["goal"], Trigger.from_settings(settings), settings.get("target"),
                            settings.get("target_domain"), tuple(path for path, _ in settings.get("held_images", ())))


register_malicious_client(Backdoor())
