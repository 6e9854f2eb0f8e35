"""Reconstruction by optimisation: gradient matching and feature inversion.

The dummy image lives in ``[0, 1]`` pixel space, starts from uniform noise,
is normalised with the ImageNet statistics on its way into the model, and is
projected back to ``[0, 1]`` after every step (Geiping et al.'s box
constraint).  The model is in eval mode throughout.  The optimiser is Adam
with L2RW+'s settings (paper 003, "Discussion on privacy": lr 0.01, 200
iterations); Geiping et al. use signed gradients and lr 0.1 with decay over
thousands of iterations, which ``--lr`` / ``--iterations`` can approach.

Attacks (``ATTACKS``):

* ``"dlg"`` (Zhu, Liu & Han, "Deep Leakage from Gradients", NeurIPS 2019,
  Eq. 4): ``min_{x', y'} ||grad(x', y') - grad||^2`` jointly over the image and
  a soft label ``softmax(y')`` (the paper uses L-BFGS; Adam here).
* ``"idlg"`` (Zhao et al. 2020): the same L2 matching with the label inferred
  analytically first (:mod:`.labels`), then fixed.
* ``"ig"`` (Geiping, Bauermeister, Droege & Moeller, "Inverting Gradients --
  How easy is it to break privacy in federated learning?", NeurIPS 2020,
  Eq. 4): ``1 - <grad(x', y), grad> / (||grad(x', y)|| ||grad||) + alpha TV(x')``
  over all observed layers, label inferred as in iDLG.

``match`` and ``tv`` override an attack's default distance and total-variation
weight (``ATTACK_DEFAULTS``).  TV is kornia's anisotropic total variation with
``reduction="mean"`` (mean absolute vertical plus horizontal difference),
averaged over channels, as in Geiping et al.'s implementation.

Feature inversion (the ``shared-feature`` threat model): ``min_x' d(h(x'), h) +
alpha TV(x')`` with ``h`` the leaked pooled trunk feature and ``d`` the squared
L2 distance or one minus the cosine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import kornia
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from privreid.errors import ConfigError

from .threat_models import BOTTLENECK, Observation, parameter_gradients, shared_surrogate_loss, to_model_input

ATTACKS = ("dlg", "idlg", "ig")
MATCHES = ("l2", "cosine")
#: attack -> (distance, TV weight)
ATTACK_DEFAULTS = {"dlg": ("l2", 0.0), "idlg": ("l2", 0.0), "ig": ("cosine", 1e-4)}


@dataclass(frozen=True)
class InversionSettings:
    """Attack, distance, TV weight and Adam schedule; ``match`` / ``tv`` ``None`` = the attack's default."""

    attack: str = "idlg"
    match: str | None = None
    tv: float | None = None
    iterations: int = 200
    lr: float = 0.01

    def __post_init__(self) -> None:
        if self.attack not in ATTACKS:
            raise ConfigError(f"unknown attack {self.attack!r}; choose one of {', '.join(ATTACKS)}")
        if self.match is not None and self.match not in MATCHES:
            raise ConfigError(f"unknown --match {self.match!r}; choose one of {', '.join(MATCHES)}")
        if self.tv is not None and not 0 <= self.tv < float("inf"):
            raise ConfigError(f"--tv must be finite and >= 0 (got {self.tv})")
        if self.iterations < 1:
            raise ConfigError(f"--iterations must be >= 1 (got {self.iterations})")
        if not 0 < self.lr < float("inf"):
            raise ConfigError(f"--lr must be finite and > 0 (got {self.lr})")

    @property
    def distance(self) -> str:
        return self.match or ATTACK_DEFAULTS[self.attack][0]

    @property
    def tv_weight(self) -> float:
        return ATTACK_DEFAULTS[self.attack][1] if self.tv is None else self.tv


def gradient_distance(dummy: list[torch.Tensor], observed: list[torch.Tensor], match: str) -> torch.Tensor:
    """``sum_k ||d_k - o_k||^2`` (DLG) or ``1 - <d, o> / (||d|| ||o||)`` over all layers together (IG)."""
    if match == "l2":
        return sum(((d - o) ** 2).sum() for d, o in zip(dummy, observed))
    dot = sum((d * o).sum() for d, o in zip(dummy, observed))
    dnorm = torch.sqrt(sum((d ** 2).sum() for d in dummy))
    onorm = torch.sqrt(sum((o ** 2).sum() for o in observed))
    return 1 - dot / (dnorm * onorm + 1e-12)


def feature_distance(feature: torch.Tensor, target: torch.Tensor, match: str) -> torch.Tensor:
    if match == "l2":
        return ((feature - target) ** 2).sum()
    return 1 - F.cosine_similarity(feature, target, dim=-1).sum()


def total_variation(images: torch.Tensor) -> torch.Tensor:
    """Mean absolute neighbour difference per channel, averaged (kornia, ``reduction="mean"``)."""
    return kornia.losses.total_variation(images, reduction="mean").mean()


def random_image(shape: tuple[int, ...], generator: torch.Generator, device: torch.device | str = "cpu"):
    """Uniform noise in ``[0, 1]``: the optimisation's start and the random-image baseline."""
    return torch.rand(shape, generator=generator).to(device)


def optimise_image(start: torch.Tensor, objective: Callable[[torch.Tensor], torch.Tensor], *,
                   settings: InversionSettings, extra: tuple[torch.Tensor, ...] = (), progress: bool = False,
                   desc: str = "inverting") -> tuple[torch.Tensor, float]:
    """Adam on ``objective(x) + tv * TV(x)`` from ``start`` (``(1, 3, H, W)``), projected onto ``[0, 1]``.

    ``extra`` are further tensors optimised jointly (DLG's label).  Returns
    the final image and objective value.
    """
    x = start.detach().clone().requires_grad_(True)
    variables = [x, *extra]
    opt = torch.optim.Adam(variables, lr=settings.lr)
    tv = settings.tv_weight
    bar = tqdm(range(settings.iterations), desc=desc, leave=False, disable=not progress, dynamic_ncols=True)
    value = float("nan")
    for _ in bar:
        loss = objective(x)
        if tv > 0:
            loss = loss + tv * total_variation(x)
        grads = torch.autograd.grad(loss, variables)
        for v, g in zip(variables, grads):
            v.grad = g
        opt.step()
        with torch.no_grad():
            x.clamp_(0, 1)
        value = float(loss.detach())
        bar.set_postfix(loss=f"{value:.4g}")
    return x.detach(), value


def matched_names(observation: Observation) -> list[str]:
    """The observed parameters a gradient-matching attack compares.

    ``full``: all of them.  ``shared``: the trunk and the bottleneck, the
    parameters the surrogate loss reaches (:func:`.threat_models.shared_surrogate_loss`).
    """
    if observation.threat == "full":
        return list(observation.grads)
    if observation.threat == "shared":
        return [n for n in observation.grads if n.startswith(("backbone.", f"{BOTTLENECK}."))]
    raise ConfigError(f"threat {observation.threat!r} is attacked by feature inversion, not gradient matching")


def invert_gradients(model: nn.Module, observation: Observation, start: torch.Tensor, *,
                     settings: InversionSettings, loss_fn: nn.Module, label: int | None = None,
                     generator: torch.Generator | None = None,
                     progress: bool = False) -> tuple[torch.Tensor, int | None]:
    """Gradient matching for the ``full`` and ``shared`` threat models.

    ``full``: DLG optimises a soft label (its argmax is returned as the
    inferred label); iDLG / IG need ``label`` (inferred beforehand) and use
    the client's loss ``loss_fn``.  ``shared``: the surrogate loss with the
    observed upstream gradient; no label is involved.  Returns ``(image,
    label)`` with the image ``(1, 3, H, W)`` in ``[0, 1]``.
    """
    model.eval()
    names = matched_names(observation)
    target = [observation.grads[n] for n in names]
    match = settings.distance
    if observation.threat == "shared":
        upstream = observation.grads[f"{BOTTLENECK}.bias"]

        def objective(x):
            loss = shared_surrogate_loss(model, x, upstream)
            return gradient_distance(parameter_gradients(loss, model, names, create_graph=True), target, match)

        return optimise_image(start, objective, settings=settings, progress=progress)[0], None
    if settings.attack == "dlg":
        soft = torch.randn(1, model.num_classes, generator=generator).to(start.device).requires_grad_(True)

        def objective(x):
            logits = model.forward_train(to_model_input(x))[2]
            loss = F.cross_entropy(logits, F.softmax(soft, dim=-1))
            return gradient_distance(parameter_gradients(loss, model, names, create_graph=True), target, match)

        image, _ = optimise_image(start, objective, settings=settings, extra=(soft,), progress=progress)
        return image, int(soft.detach().argmax())
    if label is None:
        raise ConfigError(f"attack {settings.attack!r} needs the inferred label")
    y = torch.tensor([label], device=start.device)

    def objective(x):
        loss = loss_fn(model.forward_train(to_model_input(x))[2], y)
        return gradient_distance(parameter_gradients(loss, model, names, create_graph=True), target, match)

    return optimise_image(start, objective, settings=settings, progress=progress)[0], label


def invert_feature(model: nn.Module, feature: torch.Tensor, start: torch.Tensor, *, settings: InversionSettings,
                   progress: bool = False) -> torch.Tensor:
    """Feature inversion: an image whose pooled trunk feature matches ``feature`` (``shared-feature``)."""
    model.eval()
    target = feature.detach()[None]
    match = settings.distance
    return optimise_image(start, lambda x: feature_distance(model.backbone(to_model_input(x)), target, match),
                          settings=settings, progress=progress)[0]
