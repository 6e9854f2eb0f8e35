"""Reconstruction by optimisation: gradient matching and feature inversion.

The dummy batch is optimised in the model's normalised input space (``space="normalised"``) or in ``[0, 1]``
pixels (``"pixels"``), boxed to valid pixels after every step (Geiping et al.'s box constraint), the model in
eval mode. The optimiser (:func:`optimise_image`, :class:`~.settings.InversionSettings`): Adam or SGD on the
objective's gradient or its sign (``signed``; Geiping et al. 2020, Sec. 4); the ``step`` schedule (lr / 10 at
3/8, 5/8, 7/8 of the iterations, :data:`~.settings.STEP_MILESTONES`); ``select="best"`` returns the iterate with
the lowest objective, ``"last"`` the final one (L2RW+'s setting); ``restarts``: random starts (``N(0, 1)``
normalised or ``U[0, 1]`` pixels) compared by final objective (Geiping et al.'s "trials").

Attacks (:data:`~.settings.INVERSION_ATTACKS`; a new one: :func:`~.settings.register_inversion_attack`):

* ``"dlg"`` (Zhu, Liu & Han, "Deep Leakage from Gradients", NeurIPS 2019, Eq. 4):
  ``min_{x', y'} ||grad(x', y') - grad||^2`` jointly with soft labels ``softmax(y')`` (Adam, not L-BFGS).
* ``"idlg"`` (Zhao et al. 2020): the same, labels inferred first (:mod:`.labels`; batches by count rules).
* ``"ig"`` (Geiping, Bauermeister, Droege & Moeller, "Inverting Gradients", NeurIPS 2020, Eq. 4):
  ``1 - <grad(x', y), grad> / (||grad(x', y)|| ||grad||) + alpha TV(x')`` over all observed layers, labels as
  iDLG, ``alpha`` 0.2 on the normalised image.

``match`` and ``tv`` override an attack's distance and TV weight. TV (on the optimised variable):
:func:`total_variation`. ``bn`` adds Yin et al.'s BatchNorm-statistics prior ("See through Gradients", CVPR
2021, Eq. 9): ``sum_l ||mu_l(x') - mu_l||_2 + ||sigma^2_l(x') - sigma^2_l||_2`` against the running statistics.
The observed gradient's norm is computed once (:class:`GradientMatch`). A multi-step update (``local_steps`` >
1) is observed as ``(theta_0 - theta_T) / (local_lr T)`` (:func:`.observation.local_update`) and matched by the
dummy batch's one-step gradient (``update="gradient"``) or by simulating the ``T`` steps (``"simulate"``;
Geiping et al., Sec. 6). Feature inversion (``shared-feature``): ``min_x' d(h(x'), h) + alpha TV(x')``, ``h``
the leaked pooled trunk feature, ``d`` squared L2 or one minus the cosine.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from privreid.errors import ConfigError
from privreid.log import progress_bar

from privreid.inversion.observation import (BOTTLENECK, Observation, infer_labels, local_update, parameter_gradients,
                                            shared_surrogate_loss, surrogate_names, to_model_input)
from privreid.inversion.settings import (STEP_MILESTONES, InversionAttack, InversionSettings,
                                         register_inversion_attack)

#: a drawn progress bar shows the objective of every LOG_EVERY-th iteration (each read waits for the device)
LOG_EVERY = 10


class IDLG(InversionAttack):
    """iDLG (Zhao et al. 2020): L2 gradient matching with the labels inferred analytically first, then fixed."""

    name = "idlg"
    summary = "iDLG"

    def invert_full(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        labels, rule = infer_labels(model, observation, label_smoothing)
        y = torch.tensor(labels, device=start.device)
        image = _match_gradients(model, observation, start,
                                 lambda x: loss_fn(model.forward_train(to_model_input(x))[2], y),
                                 names=list(observation.grads), settings=settings, progress=progress).image
        return image, labels[0] if observation.batch == 1 else labels, rule


class InvertingGradients(IDLG):
    """Inverting Gradients (Geiping et al. 2020, Eq. 4): cosine matching plus TV, labels inferred as in iDLG."""

    name = "ig"
    summary = "Inverting Gradients"
    distance = "cosine"
    tv = 0.2


class DLG(InversionAttack):
    """DLG (Zhu et al. 2019, Eq. 4): L2 matching jointly over the images and soft labels ``softmax(y')``."""

    name = "dlg"
    summary = "DLG"

    def invert_full(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        soft = torch.randn(observation.batch, model.num_classes, generator=generator).to(start.device)

        def loss(x, soft):
            return F.cross_entropy(model.forward_train(to_model_input(x))[2], F.softmax(soft, dim=-1))

        found = _match_gradients(model, observation, start, loss, names=list(observation.grads), settings=settings,
                                 progress=progress, extra=(soft,))
        labels = [int(k) for k in found.extra[0].argmax(dim=-1)]
        return found.image, labels[0] if observation.batch == 1 else labels, "dlg (optimised soft label)"


for _attack in (DLG(), IDLG(), InvertingGradients()):  # in ``--help`` order
    register_inversion_attack(_attack)


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


def total_variation(images: torch.Tensor, form: str = "anisotropic") -> torch.Tensor:
    """Total variation of ``(B, C, H, W)`` images, averaged over batch and channels: ``anisotropic``, the mean
    absolute vertical plus horizontal neighbour difference (kornia, ``reduction="mean"``); ``isotropic``, the
    mean of ``sqrt(dx^2 + dy^2)`` (Rudin, Osher & Fatemi, as Geiping et al.'s Eq. 4)."""
    if form == "isotropic":
        dx = images[..., :-1, 1:] - images[..., :-1, :-1]
        dy = images[..., 1:, :-1] - images[..., :-1, :-1]
        return torch.sqrt(dx ** 2 + dy ** 2 + 1e-8).mean()
    import kornia  # here, not at module level: ``privreid --help`` reads this module's registry

    return kornia.losses.total_variation(images, reduction="mean").mean()


def _stats(device) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1),
            torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1))


def to_space(pixels: torch.Tensor, space: str) -> torch.Tensor:
    """``[0, 1]`` pixels -> the optimised variable (``normalised``: ``(x - mean) / std``; ``pixels``: as is)."""
    if space == "pixels":
        return pixels
    mean, std = _stats(pixels.device)
    return (pixels - mean) / std


def to_pixels(variable: torch.Tensor, space: str) -> torch.Tensor:
    """The optimised variable -> ``[0, 1]`` pixels (the inverse of :func:`to_space`; differentiable)."""
    if space == "pixels":
        return variable
    mean, std = _stats(variable.device)
    return variable * std + mean


def random_start(shape: tuple[int, ...], generator: torch.Generator, start: str = "normal",
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """A random start in ``[0, 1]`` pixels: ``uniform`` noise (L2RW+'s), or ``normal``: N(0, 1) in the normalised
    input space (Geiping et al.'s start), mapped to pixels and boxed.  It is also the random-image baseline."""
    if start == "uniform":
        return torch.rand(shape, generator=generator).to(device)
    return to_pixels(torch.randn(shape, generator=generator).to(device), "normalised").clamp(0, 1)


class BatchNormStatistics:
    """Yin et al.'s (2021, Eq. 9) prior: ``sum_l ||mu_l - running_mean_l|| + ||var_l - running_var_l||`` over the
    BatchNorm2d layers of ``model``, from the batch statistics of their inputs in the forward passes since the
    last :meth:`penalty` (collected by hooks while the context is open)."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None]
        if not self.layers:
            raise ConfigError("--bn: the model has no BatchNorm2d layer with running statistics to match")
        self.terms: list[torch.Tensor] = []

    def _hook(self, module, inputs, output) -> None:
        x = inputs[0]
        mean, var = x.mean(dim=(0, 2, 3)), x.var(dim=(0, 2, 3), unbiased=False)
        self.terms.append(torch.norm(mean - module.running_mean, 2) + torch.norm(var - module.running_var, 2))

    def __enter__(self) -> "BatchNormStatistics":
        self.handles = [m.register_forward_hook(self._hook) for m in self.layers]
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()

    def penalty(self) -> torch.Tensor:
        value, self.terms = sum(self.terms), []
        return value


@dataclass
class Optimised:
    """:func:`optimise_image`'s result: the images in ``[0, 1]``, their objective and the extra variables."""

    image: torch.Tensor
    value: float
    extra: tuple[torch.Tensor, ...] = ()


def _optimiser(settings: InversionSettings, variables: list[torch.Tensor]):
    if settings.optimizer == "sgd":
        opt = torch.optim.SGD(variables, lr=settings.lr)
    else:
        opt = torch.optim.Adam(variables, lr=settings.lr)
    milestones = [int(f * settings.iterations) for f in STEP_MILESTONES] if settings.schedule == "step" else []
    return opt, torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)


def _regularised(objective: Callable[..., torch.Tensor], settings: InversionSettings, model: nn.Module | None):
    """``objective + tv * TV(variable) + bn * BN statistics``, a function of the optimised variable (and extras)."""
    tv, space, form = settings.tv_weight, settings.space, settings.tv_form
    bn = BatchNormStatistics(model) if settings.bn > 0 and model is not None else None

    def value(z, *extra):
        loss = objective(to_pixels(z, space), *extra)
        if tv > 0:
            loss = loss + tv * total_variation(z, form)
        if bn is not None:
            loss = loss + settings.bn * bn.penalty()
        return loss

    return value, bn


def optimise_image(start: torch.Tensor, objective: Callable[..., torch.Tensor], *, settings: InversionSettings,
                   extra: tuple[torch.Tensor, ...] = (), batch: int = 1, progress: bool = False,
                   desc: str = "inverting", model: nn.Module | None = None) -> Optimised:
    """Minimise ``objective(x, *extra) + tv * TV + bn * BN prior`` over images ``x`` (module docstring).

    ``start``: ``restarts x batch`` images in ``[0, 1]`` (trial ``r`` is rows
    ``r * batch`` to ``(r + 1) * batch``); ``extra``: further variables
    optimised jointly (DLG's labels), each trial from their given values;
    ``model`` is the network whose BatchNorm statistics the ``bn`` prior reads.
    Returns the trial with the lowest objective: its images in ``[0, 1]``
    (the best or the last iterate, ``settings.select``) and its extra variables.
    """
    value_of, bn = _regularised(objective, settings, model)
    trials = max(len(start) // batch, 1)
    low, high = to_space(torch.zeros(1, 3, 1, 1, device=start.device), settings.space), \
        to_space(torch.ones(1, 3, 1, 1, device=start.device), settings.space)
    best: Optimised | None = None
    with bn if bn is not None else nullcontext():
        for trial in range(trials):
            found = _one_trial(to_space(start[trial * batch:(trial + 1) * batch], settings.space), value_of, extra,
                               settings=settings, box=(low, high), final=settings.select == "best" or trials > 1,
                               progress=progress, desc=desc if trials == 1 else f"{desc} ({trial + 1}/{trials})")
            if best is None or found.value < best.value:
                best = found
    return best


def _one_trial(z0: torch.Tensor, value_of, extra: tuple[torch.Tensor, ...], *, settings: InversionSettings,
               box: tuple[torch.Tensor, torch.Tensor], final: bool, progress: bool, desc: str) -> Optimised:
    """One start: ``settings.iterations`` steps; the best (or last) iterate as pixels, with its objective.

    The best iterate is selected on the device (``torch.where``) and the objective read once, at the end: no
    host-device synchronisation per iteration (issue 42); a drawn bar reads it every ``LOG_EVERY`` iterations."""
    z = z0.detach().clone().requires_grad_(True)
    extras = [e.detach().clone().requires_grad_(True) for e in extra]
    variables = [z, *extras]
    opt, schedule = _optimiser(settings, variables)
    keep_best = settings.select == "best"
    best_value, best, found = torch.tensor(float("inf"), device=z.device), [v.detach() for v in variables], None
    bar = progress_bar(range(settings.iterations), desc=desc, leave=False, enabled=progress)
    value = torch.tensor(float("nan"))

    def keep(value: torch.Tensor) -> None:  # the iterate just evaluated, if its objective is the lowest so far
        nonlocal best_value, best, found
        better = value < best_value
        best_value = torch.where(better, value, best_value)
        best = [torch.where(better, v.detach(), b) for v, b in zip(variables, best)]
        found = better if found is None else found | better

    for i in bar:
        loss = value_of(z, *extras)
        grads = torch.autograd.grad(loss, variables)
        value = loss.detach()
        if keep_best:  # before the step moves it
            keep(value)
        for v, g in zip(variables, grads):
            v.grad = g.sign() if settings.signed else g
        opt.step()
        schedule.step()
        with torch.no_grad():
            z.copy_(torch.maximum(torch.minimum(z, box[1]), box[0]))
        if not bar.disable and i % LOG_EVERY == 0:
            bar.set_postfix(loss=f"{float(value):.4g}")
    if final:  # the last iterate's own objective (it was never evaluated inside the loop)
        value = value_of(z, *extras).detach()
        if keep_best:
            keep(value)
    # no iterate with a finite objective: the last one, as it is
    chosen = [v.detach() for v in variables] if found is None else \
        [torch.where(found, b, v.detach()) for v, b in zip(variables, best)]
    return Optimised(to_pixels(chosen[0], settings.space).clamp(0, 1) if settings.space != "pixels" else chosen[0],
                     float(best_value if keep_best else value), tuple(chosen[1:]))


def _match_gradients(model: nn.Module, observation: Observation, start: torch.Tensor,
                     loss: Callable[..., torch.Tensor], *, names: list[str], settings: InversionSettings,
                     progress: bool, extra: tuple[torch.Tensor, ...] = ()) -> Optimised:
    """Gradient matching: optimise the batch ``x`` so that the update of ``loss(x, *extra)`` for the observed
    parameters ``names`` matches the observation (its one-step gradient, or the simulated local steps' averaged
    update, module docstring)."""
    model.eval()
    distance = GradientMatch([observation.grads[n] for n in names], settings.distance)
    simulate = settings.local_steps > 1 and settings.update == "simulate"

    def objective(x, *extra):
        if simulate:
            return distance(local_update(model, names, lambda: loss(x, *extra), settings.local_steps,
                                         settings.local_lr, create_graph=True))
        return distance(parameter_gradients(loss(x, *extra), model, names, create_graph=True))

    return optimise_image(start, objective, settings=settings, extra=extra, progress=progress,
                          batch=observation.batch, model=model)


def invert_shared_gradients(model: nn.Module, observation: Observation, start: torch.Tensor, *,
                            settings: InversionSettings, progress: bool = False) -> torch.Tensor:
    """Gradient matching for the ``shared`` threat model: the surrogate loss with the observed upstream
    gradient (:func:`.observation.shared_surrogate_loss`), matched on the parameters it reaches
    (:func:`.observation.surrogate_names`); no label is involved.  ``(1, 3, H, W)`` in ``[0, 1]``."""
    upstream = observation.grads[f"{BOTTLENECK}.bias"]
    return _match_gradients(model, observation, start, lambda x: shared_surrogate_loss(model, x, upstream),
                            names=surrogate_names(observation.grads), settings=settings, progress=progress).image


def invert_feature(model: nn.Module, feature: torch.Tensor, start: torch.Tensor, *, settings: InversionSettings,
                   progress: bool = False) -> torch.Tensor:
    """Feature inversion: an image whose pooled trunk feature matches ``feature`` (``shared-feature``)."""
    model.eval()
    target = feature.detach()[None]
    match = settings.distance
    return optimise_image(start, lambda x: feature_distance(model.backbone(to_model_input(x)), target, match),
                          settings=settings, progress=progress, model=model).image
