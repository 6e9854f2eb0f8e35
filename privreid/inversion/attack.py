"""One gradient-inversion attack on one subject (or one batch of subjects), end to end: observe, infer the
labels, reconstruct.

:func:`reconstruct_batch` runs the client's step under a threat model with the defenses in force and lets the
threat model reconstruct from random starts; the first start is the random-image baseline. A batch's
reconstructions are matched to subjects by least total MSE (Hungarian, :func:`match_reconstructions`), the
recovered labels as a multiset (:func:`.labels.assign_labels`). :func:`reconstruct` is the one-image case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from privreid.losses import identity_loss

from privreid.inversion.defenses import NO_DEFENSE, Defense
from privreid.inversion.labels import assign_labels
from privreid.inversion.optimise import random_start
from privreid.inversion.settings import InversionSettings
from privreid.inversion.threat_models import THREATS, observe


@dataclass
class Reconstruction:
    """A subject, its reconstruction and the random start, each ``(3, H, W)`` in ``[0, 1]`` on the CPU;
    ``inferred_label`` / ``label_rule`` ``None`` when the head is not observed."""

    subject: torch.Tensor
    reconstruction: torch.Tensor
    baseline: torch.Tensor
    label: int
    inferred_label: int | None
    label_rule: str | None


def match_reconstructions(subjects: torch.Tensor, images: torch.Tensor) -> list[int]:
    """``order[j]``: the reconstruction matched to subject ``j``, minimising the total MSE (both ``(B, 3, H, W)``)."""
    from scipy.optimize import linear_sum_assignment

    if len(subjects) == 1:
        return [0]
    cost = ((subjects[:, None].double() - images[None].double()) ** 2).flatten(2).mean(-1)
    rows, cols = linear_sum_assignment(cost.cpu().numpy())
    return [int(c) for _, c in sorted(zip(rows, cols))]


def reconstruct_batch(model: nn.Module, subjects: torch.Tensor, labels: Sequence[int], *, threat: str,
                      shared: set[str], settings: InversionSettings, label_smoothing: float = 0.0,
                      defense: Defense = NO_DEFENSE, seed: int = 0, progress: bool = False) -> list[Reconstruction]:
    """Attack the client's step on ``subjects`` (``(B, 3, H, W)`` in ``[0, 1]``) with client labels ``labels``;
    one :class:`Reconstruction` per subject, in order. ``model``: the client's (head included, eval mode);
    ``shared``: its shared parameters; ``seed`` fixes defense noise, starts and DLG's soft labels."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    loss_fn = identity_loss(label_smoothing)
    subjects = subjects.to(device)
    labels = [int(y) for y in labels]
    batch = len(subjects)
    observation = observe(model, subjects, labels, threat=threat, shared=shared, loss_fn=loss_fn, defense=defense,
                          generator=generator, local_steps=settings.local_steps, local_lr=settings.local_lr)
    start = random_start((settings.restarts * batch, *subjects.shape[1:]), generator, settings.start, device)
    images, inferred, rule = THREATS[threat].reconstruct(
        model, observation, start, settings=settings, loss_fn=loss_fn, label_smoothing=label_smoothing,
        generator=generator, progress=progress)
    order = match_reconstructions(subjects, images)
    if inferred is None:
        credited = [None] * batch
    else:
        credited = assign_labels(list(inferred) if isinstance(inferred, (list, tuple)) else [int(inferred)], labels)
    return [Reconstruction(subject=subjects[j].cpu(), reconstruction=images[order[j]].cpu(),
                           baseline=start[j].cpu(), label=labels[j], inferred_label=credited[j], label_rule=rule)
            for j in range(batch)]


def reconstruct(model: nn.Module, subject: torch.Tensor, label: int, *, threat: str, shared: set[str],
                settings: InversionSettings, label_smoothing: float = 0.0, defense: Defense = NO_DEFENSE,
                seed: int = 0, progress: bool = False) -> Reconstruction:
    """Attack the client's one-image step on ``subject`` (``(3, H, W)`` in ``[0, 1]``) with client label ``label``
    (:func:`reconstruct_batch` with a batch of one)."""
    [rec] = reconstruct_batch(model, subject[None], [label], threat=threat, shared=shared, settings=settings,
                              label_smoothing=label_smoothing, defense=defense, seed=seed, progress=progress)
    return rec
