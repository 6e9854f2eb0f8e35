"""Membership inference on members and non-members the caller names: any model, no privreid run behind it.

``privreid.audit(model, members, nonmembers)`` and ``privreid audit`` on a foreign model file score the
candidates with the feature or loss attack exactly as :func:`privreid.auditing.run_audit` does. No LiRA: its
shadow models need a privreid run's recorded configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from privreid.errors import ConfigError
from privreid.auditing.membership import LEVELS, Candidate, MembershipSet

#: the attacks that need no shadow models
GIVEN_ATTACKS = ("feature", "loss")


@dataclass
class GivenAudit:
    """One scored audit: the membership set, the scores, the statistic scored and the record's numbers
    (:func:`privreid.auditing.metrics.summarise`)."""

    members: MembershipSet
    scores: np.ndarray
    statistic: str
    record: dict[str, Any]


def membership_candidates(members: list[tuple], nonmembers: list[tuple], level: str) -> list[Candidate]:
    """A candidate per image (``level="image"``) or per identity, members first, from ``(path, identity, ...)``
    samples; ConfigError when an image (or, at identity level, an identity) is on both sides or a side is empty."""
    if not members or not nonmembers:
        raise ConfigError("an audit needs members and non-members")
    candidates: dict[str, Candidate] = {}
    for member, samples in ((True, members), (False, nonmembers)):
        for sample in samples:
            path, identity = str(sample[0]), str(sample[1])
            key = path if level == "image" else identity
            known = candidates.get(key)
            if known is not None and (level == "image" or known.member != member):
                raise ConfigError(f"{key!r} is both a member and a non-member" if known.member != member
                                  else f"the image {path} is listed twice")
            if known is None:
                candidates[key] = Candidate(key, member, identity, [], None)
            candidates[key].probes.append(path)
    return list(candidates.values())


def audit_given(net: nn.Module, size: tuple[int, int], members: list[tuple], nonmembers: list[tuple], *,
                level: str = "image", attack: str = "feature", bootstrap: int = 200, seed: int = 0,
                batch_size: int = 128, device: Any = "cpu") -> GivenAudit:
    """Score ``members`` against ``nonmembers`` under ``net`` (ImageNet-normalised ``size`` input -> features,
    a ``classifier`` attribute for the loss attack)."""
    from privreid.auditing.membership_attacks import MEMBERSHIP_ATTACKS
    from privreid.auditing.metrics import summarise
    from privreid.auditing.statistics import probe_outputs, unique_probes

    if attack not in GIVEN_ATTACKS:
        raise ConfigError(f"an audit of a model without a privreid run runs the feature or loss attack, got "
                          f"{attack!r} (LiRA needs shadow models trained like the target: privreid audit on "
                          "privreid checkpoints)")
    if level not in LEVELS:
        raise ConfigError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    if attack == "loss" and getattr(net, "classifier", None) is None:
        raise ConfigError("the loss attack reads the classifier's log-likelihood; this model has no classifier "
                          "(use the feature attack)")
    ms = MembershipSet(level, None, "given", membership_candidates(members, nonmembers, level))
    outputs = probe_outputs(net, unique_probes(ms), height=size[0], width=size[1], device=device, batch_size=batch_size)
    scored = MEMBERSHIP_ATTACKS[attack].score(ms, outputs)
    return GivenAudit(ms, scored.scores, scored.statistic,
                      summarise(ms.labels, scored.scores, bootstrap=bootstrap, seed=seed))


def split_membership(datasets: dict[str, Any]) -> tuple[list[tuple], list[tuple]]:
    """Identity-level members and non-members of a model trained on ``datasets``' training splits: each
    domain's training identities, and its test (query and gallery) identities, which ReID benchmarks keep
    disjoint from the training ones."""
    members = [(path, f"{name}/train/{pid}") for name, ds in datasets.items() for path, pid, *_ in ds.train]
    nonmembers = [(path, f"{name}/test/{pid}") for name, ds in datasets.items()
                  for path, pid, *_ in [*ds.query, *ds.gallery]]
    return members, nonmembers


def audit_files(models: list, labels: list[str], data: list[str], out, *, attacks: list[str], bootstrap: int,
                seed: int, device: Any) -> list[dict[str, Any]]:
    """``privreid audit`` on model files from elsewhere (:class:`privreid.models.evaluated.EvaluatedModel`):
    identity level, the released model, members and non-members from ``data`` (:func:`split_membership`);
    writes the report as :func:`privreid.auditing.run_audit` does and returns its records."""
    from privreid.data.catalog import resolve_datasets
    from privreid.auditing.report import record_label, write_report

    members, nonmembers = split_membership(resolve_datasets(list(data)))
    records, curves = [], []
    for label, model in zip(labels, models):
        net = model.network(device=device)
        for attack in attacks:
            scored = audit_given(net, model.input_size, members, nonmembers, level="identity", attack=attack,
                                 bootstrap=bootstrap, seed=seed, device=device)
            rec = {"model": label, "checkpoint": str(model.path), "level": "identity", "attack": attack,
                   "view": "public", **scored.record,
                   "settings": {"statistic": scored.statistic, **scored.members.describe(),
                                "members": "training identities of --data", "nonmembers": "its test identities",
                                "seed": seed, "model": model.provenance()}}
            records.append(rec)
            curves.append((record_label(rec), scored.members.labels, scored.scores))
    write_report(out, records, curves)
    return records
