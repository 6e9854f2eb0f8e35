"""Reconstruction by optimisation: gradient matching and feature inversion.

The dummy image lives in ``[0, 1]`` pixel space, starts from uniform noise,
is normalised with the ImageNet statistics on its way into the model, and is
projected back to ``[0, 1]`` after every step (Geiping et al.'s box
constraint).  The model is in eval mode throughout.  The optimiser is Adam
with L2RW+'s settings (paper 003, "Discussion on privacy": lr 0.01, 200
iterations); Geiping et al. use signed gradients and lr 0.1 with decay over
thousands of iterations, which ``--lr`` / ``--iterations`` can approach.

Attacks (``ATTACKS``, a registry of :class:`InversionAttack` objects; a new one
is a subclass and one :func:`register_inversion_attack`):

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
weight (:attr:`InversionAttack.distance`, :attr:`InversionAttack.tv`).  TV is kornia's anisotropic total variation with
``reduction="mean"`` (mean absolute vertical plus horizontal difference),
averaged over channels, as in Geiping et al.'s implementation.  The observed
gradient's norm (the cosine distance's denominator) is computed once per
reconstruction (:class:`GradientMatch`), not at every iteration: the same
float operations on the same tensors, so reconstructions are bit-identical.

Feature inversion (the ``shared-feature`` threat model): ``min_x' d(h(x'), h) +
alpha TV(x')`` with ``h`` the leaked pooled trunk feature and ``d`` the squared
L2 distance or one minus the cosine.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from privreid.errors import ConfigError
from privreid.log import progress_bar
from privreid.registry import Registry

from .settings import MATCHES, InversionSettings  # noqa: F401  (re-exported: the settings of every attack)
from .threat_models import BOTTLENECK, Observation, parameter_gradients, shared_surrogate_loss, to_model_input



class InversionAttack:
    """A gradient-inversion attack: its ``--attack`` name, default distance and TV weight, and how it inverts
    a ``full`` observation (:meth:`invert_full`; the shared threat models need no label and share one
    objective, :func:`invert_shared_gradients`)."""

    name: str = ""
    summary: str = ""
    distance: str = "l2"
    tv: float = 0.0

    def invert_full(self, model: nn.Module, observation: Observation, start: torch.Tensor, *,
                    settings: "InversionSettings", loss_fn: nn.Module, label_smoothing: float,
                    generator: torch.Generator | None, progress: bool) -> tuple[torch.Tensor, int | None, str | None]:
        """``(image, inferred label, label rule)`` from the whole observed gradient."""
        raise NotImplementedError


class IDLG(InversionAttack):
    """iDLG (Zhao et al. 2020): L2 gradient matching with the label inferred analytically first, then fixed."""

    name = "idlg"
    summary = "iDLG"

    def invert_full(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        from .threat_models import infer_label

        label, rule = infer_label(model, observation, label_smoothing)
        y = torch.tensor([label], device=start.device)
        image = _match_gradients(model, observation, start, lambda x: loss_fn(model.forward_train(to_model_input(x))[2], y),
                                 settings=settings, progress=progress)[0]
        return image, label, rule


class InvertingGradients(IDLG):
    """Inverting Gradients (Geiping et al. 2020, Eq. 4): cosine matching plus TV, label inferred as in iDLG."""

    name = "ig"
    summary = "Inverting Gradients"
    distance = "cosine"
    tv = 1e-4


class DLG(InversionAttack):
    """DLG (Zhu et al. 2019, Eq. 4): L2 matching jointly over the image and a soft label ``softmax(y')``."""

    name = "dlg"
    summary = "DLG"

    def invert_full(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        soft = torch.randn(1, model.num_classes, generator=generator).to(start.device).requires_grad_(True)

        def loss(x):
            return F.cross_entropy(model.forward_train(to_model_input(x))[2], F.softmax(soft, dim=-1))

        image = _match_gradients(model, observation, start, loss, settings=settings, progress=progress,
                                 extra=(soft,))[0]
        return image, int(soft.detach().argmax()), "dlg (optimised soft label)"


def _check_attack(attack: InversionAttack) -> None:
    if attack.distance not in MATCHES:
        raise ConfigError(f"inversion attack {attack.name!r}: distance must be one of {', '.join(MATCHES)}")


#: ``--attack`` name -> inversion attack, in ``--help`` order
ATTACKS: Registry[InversionAttack] = Registry(
    "inversion attack", builtins=lambda: (DLG(), IDLG(), InvertingGradients()), check=_check_attack)


def register_inversion_attack(attack: InversionAttack) -> InversionAttack:
    """Add ``attack`` to :data:`ATTACKS` (``--attack <name>`` then selects it); returns it."""
    return ATTACKS.register(attack)


def unregister_inversion_attack(name: str) -> None:
    """Remove inversion attack ``name`` (a test's or a notebook's own); unknown names are refused."""
    ATTACKS.unregister(name)


def attacks_help() -> str:
    """``--attack``'s help: every registered inversion attack with its default distance and TV weight."""
    return "; ".join(f"{a.name}: {a.summary} ({a.distance}, TV {a.tv:g})" for a in ATTACKS.values())


def gradient_distance(dummy: list[torch.Tensor], observed: list[torch.Tensor], match: str,
                      observed_norm: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_k ||d_k - o_k||^2`` (DLG) or ``1 - <d, o> / (||d|| ||o||)`` over all layers together (IG).

    ``observed_norm`` is ``||o||`` when the caller has it (:class:`GradientMatch`); computed here otherwise.
    """
    if match == "l2":
        return sum(((d - o) ** 2).sum() for d, o in zip(dummy, observed))
    dot = sum((d * o).sum() for d, o in zip(dummy, observed))
    dnorm = torch.sqrt(sum((d ** 2).sum() for d in dummy))
    onorm = observed_norm_of(observed) if observed_norm is None else observed_norm
    return 1 - dot / (dnorm * onorm + 1e-12)


def observed_norm_of(observed: list[torch.Tensor]) -> torch.Tensor:
    """``||o||`` over all layers together."""
    return torch.sqrt(sum((o ** 2).sum() for o in observed))


class GradientMatch:
    """The distance to fixed observed gradients, with their norm computed once (issue 14: -5 to -9% per attack)."""

    def __init__(self, observed: list[torch.Tensor], match: str) -> None:
        self.observed, self.match = observed, match
        self.observed_norm = observed_norm_of(observed) if match == "cosine" else None

    def __call__(self, dummy: list[torch.Tensor]) -> torch.Tensor:
        return gradient_distance(dummy, self.observed, self.match, self.observed_norm)


def feature_distance(feature: torch.Tensor, target: torch.Tensor, match: str) -> torch.Tensor:
    if match == "l2":
        return ((feature - target) ** 2).sum()
    return 1 - F.cosine_similarity(feature, target, dim=-1).sum()


def total_variation(images: torch.Tensor) -> torch.Tensor:
    """Mean absolute neighbour difference per channel, averaged (kornia, ``reduction="mean"``)."""
    import kornia  # here, not at module level: ``privreid --help`` reads this module's registry

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
    bar = progress_bar(range(settings.iterations), desc=desc, leave=False, enabled=progress)
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
    """The observed parameters a gradient-matching attack compares (the threat model's
    :meth:`~.threat_models.ThreatModel.matched_names`: ``full`` all of them, ``shared`` the trunk and the
    bottleneck, the parameters the surrogate loss reaches)."""
    from .threat_models import THREATS

    return THREATS[observation.threat].matched_names(observation.grads)


def _match_gradients(model: nn.Module, observation: Observation, start: torch.Tensor,
                     loss: Callable[[torch.Tensor], torch.Tensor], *, settings: InversionSettings,
                     progress: bool, extra: tuple[torch.Tensor, ...] = ()) -> tuple[torch.Tensor, float]:
    """Gradient matching: optimise ``x`` so that the gradient of ``loss(x)`` matches the observation."""
    model.eval()
    names = matched_names(observation)
    distance = GradientMatch([observation.grads[n] for n in names], settings.distance)

    def objective(x):
        return distance(parameter_gradients(loss(x), model, names, create_graph=True))

    return optimise_image(start, objective, settings=settings, extra=extra, progress=progress)


def invert_shared_gradients(model: nn.Module, observation: Observation, start: torch.Tensor, *,
                            settings: InversionSettings, progress: bool = False) -> torch.Tensor:
    """Gradient matching for the ``shared`` threat model: the surrogate loss with the observed upstream
    gradient (:func:`.threat_models.shared_surrogate_loss`); no label is involved.  ``(1, 3, H, W)`` in ``[0, 1]``."""
    upstream = observation.grads[f"{BOTTLENECK}.bias"]
    return _match_gradients(model, observation, start, lambda x: shared_surrogate_loss(model, x, upstream),
                            settings=settings, progress=progress)[0]


def invert_feature(model: nn.Module, feature: torch.Tensor, start: torch.Tensor, *, settings: InversionSettings,
                   progress: bool = False) -> torch.Tensor:
    """Feature inversion: an image whose pooled trunk feature matches ``feature`` (``shared-feature``)."""
    model.eval()
    target = feature.detach()[None]
    match = settings.distance
    return optimise_image(start, lambda x: feature_distance(model.backbone(to_model_input(x)), target, match),
                          settings=settings, progress=progress)[0]
