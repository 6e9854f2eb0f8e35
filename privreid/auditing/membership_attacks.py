"""Membership-inference attacks: one class each, in a registry (``privreid audit --method``), each turning one
model's outputs on the probes (:class:`~privreid.auditing.statistics.ProbeOutputs`) into a score per candidate
(higher: "member").

``loss``: the identity loss with the audited client's head when it covers every candidate (``--client``), else
the feature-space prototype loss (:func:`~privreid.auditing.statistics.prototype_statistics`). ``feature``:
classifier-free statistics (prototype margin per image; compactness minus nearest-neighbour similarity per
identity), for a published global model. ``lira-online`` / ``lira-offline`` (``lira``: both): LiRA
(:mod:`privreid.auditing.lira`) on the logit-scaled prototype confidence, shadows by
:mod:`privreid.auditing.shadows`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privreid.errors import ConfigError
from privreid.registry import Registry
from privreid.auditing.lira import lira_scores
from privreid.auditing.membership import MembershipSet
from privreid.auditing.statistics import ProbeOutputs, classifier_loss, neighbourhood_statistics, prototype_statistics


@dataclass
class Scored:
    scores: np.ndarray
    #: what the score is, for the record's settings
    statistic: str


class MembershipAttack:
    """One attack: its ``--method`` name and :meth:`score`; ``needs_shadows``: it takes shadow models' outputs too."""

    name = ""
    needs_shadows = False

    def score(self, ms: MembershipSet, out: ProbeOutputs) -> Scored:
        """One score per candidate of ``ms`` from the model's outputs ``out`` on its probes, higher = member."""
        raise NotImplementedError


class LossAttack(MembershipAttack):
    name = "loss"

    def score(self, ms: MembershipSet, out: ProbeOutputs) -> Scored:
        head = classifier_loss(ms, out)
        if head is not None:
            return Scored(head, "classifier log-likelihood" + (" (best class)" if ms.level == "identity" else ""))
        return Scored(prototype_statistics(ms, out)["loss"], "prototype log-likelihood (no classifier)")


class FeatureAttack(MembershipAttack):
    name = "feature"

    def score(self, ms: MembershipSet, out: ProbeOutputs) -> Scored:
        if ms.level == "image":
            return Scored(prototype_statistics(ms, out)["margin"], "prototype margin")
        return Scored(neighbourhood_statistics(ms, out)["score"], "compactness - nearest-neighbour similarity")


class LiRAAttack(MembershipAttack):
    needs_shadows = True

    def __init__(self, online: bool):
        self.online = online
        self.name = "lira-online" if online else "lira-offline"

    def score(self, ms: MembershipSet, out: ProbeOutputs, shadows: list[ProbeOutputs] | None = None,
              masks: np.ndarray | None = None) -> Scored:
        if not shadows or masks is None:
            raise ConfigError(f"{self.name} needs shadow models")
        target = prototype_statistics(ms, out)["phi"]
        stats = np.stack([prototype_statistics(ms, s)["phi"] for s in shadows])
        return Scored(lira_scores(target, stats, masks, online=self.online),
                      f"LiRA {'online' if self.online else 'offline'} on logit-scaled prototype confidence, "
                      f"K={len(shadows)}")


#: ``privreid audit --method`` name -> attack, in ``--help`` order
MEMBERSHIP_ATTACKS: Registry[MembershipAttack] = Registry(
    "membership attack", builtins=lambda: (LossAttack(), FeatureAttack(), LiRAAttack(True), LiRAAttack(False)))


def register_membership_attack(attack: MembershipAttack) -> MembershipAttack:
    """Add ``attack`` to :data:`MEMBERSHIP_ATTACKS` (``privreid audit --method <name>`` then runs it); returns it."""
    return MEMBERSHIP_ATTACKS.register(attack)


def resolve_attacks(names: list[str]) -> list[MembershipAttack]:
    """The attacks ``names`` ask for, in order, without repeats; ``lira`` is both LiRA attacks, ``all`` every one."""
    aliases = {"lira": ["lira-online", "lira-offline"], "all": MEMBERSHIP_ATTACKS.names()}
    out: list[str] = []
    for name in names:
        for n in aliases.get(name, [name]):
            if n not in MEMBERSHIP_ATTACKS:
                raise ConfigError(f"unknown membership attack {name!r}; choose from "
                                  f"{', '.join([*MEMBERSHIP_ATTACKS, *aliases])}")
            if n not in out:
                out.append(n)
    return [MEMBERSHIP_ATTACKS[n] for n in out]
