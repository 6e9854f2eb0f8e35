"""One gradient-inversion attack on one subject: observe, infer the label, reconstruct.

:func:`reconstruct` runs the client's step under a threat model
(:mod:`.threat_models`) with the defences in force (:mod:`.defenses`), and
lets the threat model reconstruct from uniform noise (inferring the label
where the head is observed, :mod:`.labels`, with the registered attack of
:mod:`.optimise`).  That starting image
is kept as the random-image baseline every metric is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from privreid.losses import identity_loss

from .defenses import NO_DEFENSE, Defense
from .optimise import InversionSettings, random_image
from .threat_models import get_threat, observe


@dataclass
class Reconstruction:
    """A subject, its reconstruction and the random start, each ``(3, H, W)`` in ``[0, 1]`` on the CPU.

    ``inferred_label`` / ``label_rule`` are ``None`` when the head is not
    observed (shared threat models).
    """

    subject: torch.Tensor
    reconstruction: torch.Tensor
    baseline: torch.Tensor
    label: int
    inferred_label: int | None
    label_rule: str | None


def reconstruct(model: nn.Module, subject: torch.Tensor, label: int, *, threat: str, shared: set[str],
                settings: InversionSettings, label_smoothing: float = 0.0, defense: Defense = NO_DEFENSE,
                seed: int = 0, progress: bool = False) -> Reconstruction:
    """Attack the client's step on ``subject`` (``(3, H, W)`` in ``[0, 1]``) with client label ``label``.

    ``model`` is the client's model (head included, eval mode) as the attacker
    knows it; ``shared`` names its shared parameters; ``label_smoothing`` is the
    run's identity loss setting (the client's loss and the attacker's).
    ``seed`` fixes the defence noise, the random start and DLG's soft label.
    """
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    loss_fn = identity_loss(label_smoothing)
    subject = subject.to(device)
    observation = observe(model, subject, label, threat=threat, shared=shared, loss_fn=loss_fn,
                          defense=defense, generator=generator)
    start = random_image((1, *subject.shape), generator, device)
    image, inferred, rule = get_threat(threat).reconstruct(
        model, observation, start, settings=settings, loss_fn=loss_fn, label_smoothing=label_smoothing,
        generator=generator, progress=progress)
    return Reconstruction(subject=subject.cpu(), reconstruction=image[0].cpu(), baseline=start[0].cpu(),
                          label=label, inferred_label=inferred, label_rule=rule)
