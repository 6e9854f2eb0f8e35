"""Feature-space adversarial attacks on ReID retrieval models, built on torchattacks.

torchattacks (3.3.0) hard-codes cross-entropy on class logits, but a ReID model at test time has no classifier.
Each class here subclasses the torchattacks attack of the same name, keeps its constructor and machinery
(``set_normalization_used``, eval mode, ``get_logits``), and overrides ``forward`` with one shared L_inf loop
that ascends a feature-space objective.

Objective (untargeted, label-free), per image, with ``f`` the raw retrieval feature and ``x`` the clean image:

    J(x') = -|| f(x') + f(x) ||_2^2,

the Opposite-Direction Feature Attack (ODFA) of Zheng et al., "Open Set Adversarial Examples" (2018). Reason:
``||f(x') - f(x)||^2`` and the cosine distance are stationary at ``x' = x``, so FGSM, BIM and MI-FGSM (which
start there) would not move; ``J``'s gradient there is ``-4 J^T f(x)``. For fixed-norm features, maximising
``J`` maximises the distance to the clean feature, and it is bounded (0 at ``f' = -f``).

Measured limitation (ResNet-18, 25 identity-CE steps, 6 synthetic identities at 32x16, the model of
tests/test_retrieval_attacks.py; eps 8/255, 10 steps, Euclidean): most of the gain comes from *shrinking* the
feature along ``f``. That breaks queries (BIM: mAP 0.78 -> 0.37) but made gallery ranking slightly better
(0.78 -> 0.85); both: 0.62. ``||f(x') - f(x)||^2`` from a random start did the reverse (query 0.79, gallery
0.63), the angular loss sat in between (0.50 / 0.69). So prefer ``target="query"`` or ``"both"``.

Update (torchattacks' L_inf): ``x' <- clip_[0,1](x + clip_[-eps,eps](x' + alpha * sign(d) - x))``, ``d`` the
gradient of ``sum_i J(x'_i)``, optionally smoothed (TI) and with momentum (MI, TI). Pixels are in ``[0, 1]``;
the ImageNet normalisation is applied inside the attack.

Defaults (:func:`build_attack`): ``eps = 8/255``, ``steps = 10``, ``alpha = 2.5 * eps / steps``
(:func:`default_alpha`: torchattacks' 2/255 at 8/255 and 10 steps, scaled so the steps can cross the eps-ball
from PGD's random start); ``steps * alpha < eps`` is warned about (:func:`warn_unreachable`). PGD starts
uniformly in the eps-ball (Madry et al.); MI-FGSM ``decay = 1.0`` (Dong et al. 2018); TI-FGSM keeps
torchattacks' defaults (Gaussian kernel 15, ``nsig = 3``, ``decay = 0``, input diversity ``resize_rate = 0.9``
with probability 0.5, no random start).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from privreid.dependencies import require
from privreid.errors import ConfigError
from privreid.registry import Registry

torchattacks = require("torchattacks")  # missing: one-line install hint, no traceback
from torchattacks.attack import Attack  # noqa: E402

__all__ = ["RETRIEVAL_ATTACKS", "FeatureAttack", "FeatureBIM", "FeatureFGSM", "FeatureMIFGSM", "FeaturePGD",
           "FeatureTIFGSM", "build_attack", "check_budget", "default_alpha", "feature_objective",
           "register_retrieval_attack", "unregister_retrieval_attack", "warn_unreachable"]


def feature_objective(adv_features: torch.Tensor, clean_features: torch.Tensor) -> torch.Tensor:
    """Per-image ODFA objective ``J = -||f(x') + f(x)||^2`` (module docstring), shape ``(B,)``: ``-4 ||f(x)||^2``
    at the clean image, 0 at ``-f(x)``."""
    return -(adv_features + clean_features).pow(2).sum(dim=1)


def _momentum_direction(grad: torch.Tensor, previous: torch.Tensor, decay: float) -> torch.Tensor:
    """MI-FGSM's accumulated gradient ``g_{t+1} = decay * g_t + grad / mean|grad|`` (Dong et al. 2018, Eq. 6).

    Per-image L1 normalisation as in torchattacks (a mean instead of the paper's sum: only the sign is used).
    An all-zero gradient stays zero instead of NaN (torchattacks divides by 0).
    """
    scale = grad.abs().mean(dim=(1, 2, 3), keepdim=True).clamp_min(torch.finfo(grad.dtype).tiny)
    return grad / scale + decay * previous


class FeatureAttack(Attack):
    """The shared L_inf feature-space loop (mixed in before a torchattacks attack class).

    Subclasses provide ``eps``, ``alpha``, ``steps`` and may override :meth:`_model_view` (what the model sees
    of the iterate) and :meth:`_direction` (gradient -> step direction). :attr:`loss_history` holds the batch
    mean of :func:`feature_objective` at every iterate a gradient was taken at (first: the start).
    Entry points: ``attack(images_normalised)`` (torchattacks' contract) and :meth:`perturb` ``(images_01)``
    (pixels in and out, no normalisation round trip, so ``eps = 0`` is bit-exact).
    """

    random_start = False
    #: registry key (``privreid attack --method NAME``)
    name = ""
    #: the row label of L2RW+'s Table IX (:func:`~privreid.retrieval_attacks.retrieval.attack_label`)
    label = ""
    #: whether the attack takes ``alpha`` and ``steps`` (FGSM: one step of ``eps``)
    iterative = True

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor | None = None, *args, **kwargs) -> torch.Tensor:
        """torchattacks' entry point with ``labels`` optional (unused; torchattacks 3.3.0 requires the argument)."""
        return super().__call__(inputs, labels, *args, **kwargs)

    def perturb(self, images: torch.Tensor, clean_features: torch.Tensor | None = None) -> torch.Tensor:
        """Adversarial versions of ``images`` (``(B, 3, H, W)`` in ``[0, 1]``), also in ``[0, 1]``.

        Like torchattacks' ``__call__``, but the normalisation is applied only in front of the model.
        ``clean_features``: the model's eval-mode features of ``images`` when the caller has them (saves the
        clean forward pass, half of FGSM's work).
        """
        given_training = self.model.training
        self._change_model_mode(given_training)
        applied = self._normalization_applied
        if self.normalization_used is not None:
            self._set_normalization_applied(False)  # get_logits() now normalises
        try:
            return self._ascend(images, clean_features)
        finally:
            self._set_normalization_applied(applied)
            self._recover_model_mode(given_training)

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Overridden: ascend :func:`feature_objective` (``labels`` are not needed and ignored)."""
        return self._ascend(images, None)

    def _ascend(self, images: torch.Tensor, clean_features: torch.Tensor | None) -> torch.Tensor:
        images = images.clone().detach().to(self.device)
        # Gradients are needed even when called under torch.no_grad() (e.g. from
        # a feature extractor pulling attacked batches).
        with torch.enable_grad():
            if clean_features is None:
                with torch.no_grad():
                    clean = self.get_logits(images)
            else:
                clean = clean_features.to(self.device)
            adv = images.clone()
            if self.random_start:
                adv = torch.clamp(adv + torch.empty_like(adv).uniform_(-self.eps, self.eps), 0, 1)
            direction = torch.zeros_like(images)
            self.loss_history: list[float] = []
            for _ in range(self.steps):
                adv.requires_grad_(True)
                objective = feature_objective(self.get_logits(self._model_view(adv)), clean)
                grad = torch.autograd.grad(objective.sum(), adv)[0]
                self.loss_history.append(float(objective.detach().mean()))
                direction = self._direction(grad, direction)
                adv = adv.detach() + self.alpha * direction.sign()
                delta = torch.clamp(adv - images, min=-self.eps, max=self.eps)
                adv = torch.clamp(images + delta, min=0, max=1).detach()
        return adv

    def _model_view(self, adv: torch.Tensor) -> torch.Tensor:
        """What the model sees of the iterate (identity; TI-FGSM: input diversity)."""
        return adv

    def _direction(self, grad: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """Step direction before the sign (plain gradient; MI / TI: momentum)."""
        return grad


class FeatureFGSM(FeatureAttack, torchattacks.FGSM):
    """FGSM (Goodfellow et al. 2015): one step of size ``eps`` along ``sign(grad J)``."""

    name = "fgsm"
    label = "FGSM"
    iterative = False
    steps = 1

    @property
    def alpha(self) -> float:
        return self.eps


class FeatureBIM(FeatureAttack, torchattacks.BIM):
    """BIM / I-FGSM (Kurakin et al. 2017): ``steps`` steps of ``alpha`` from the clean image, projected (the
    shared clip is torchattacks' max/min projection)."""

    name = "bim"
    label = "BIM"


class FeaturePGD(FeatureAttack, torchattacks.PGD):
    """PGD (Madry et al. 2018): BIM from a uniform random start in the eps-ball (``random_start=True``)."""

    name = "pgd"
    label = "PGD"


class FeatureMIFGSM(FeatureAttack, torchattacks.MIFGSM):
    """MI-FGSM (Dong et al. 2018): BIM with L1-normalised gradient momentum (``decay``)."""

    name = "mifgsm"
    label = "MIFGSM"

    def _direction(self, grad: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        return _momentum_direction(grad, previous, self.decay)


class FeatureTIFGSM(FeatureAttack, torchattacks.TIFGSM):
    """TI-FGSM (Dong et al. 2019): the gradient convolved depth-wise with torchattacks' ``stacked_kernel``, then
    accumulated as in MI-FGSM with ``decay`` (default 0), with input diversity: torchattacks' TIFGSM."""

    name = "tifgsm"
    label = "TIFGSM"

    def _model_view(self, adv: torch.Tensor) -> torch.Tensor:
        return self.input_diversity(adv)

    def _direction(self, grad: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        kernel = self.stacked_kernel.to(device=grad.device, dtype=grad.dtype)
        grad = F.conv2d(grad, kernel, stride=1, padding="same", groups=grad.shape[1])
        return _momentum_direction(grad, previous, self.decay)

    def input_diversity(self, x: torch.Tensor) -> torch.Tensor:
        """DI-FGSM's random resize-and-pad (Xie et al. 2019), keeping the image's aspect ratio.

        Deviation: torchattacks resizes to a square of the width (a 256x128 crop becomes a squashed 128x128).
        Here, with probability ``diversity_prob``, the height is drawn as torchattacks draws its side
        (``[int(H r), H)`` for ``r < 1``, ``[H, int(H r))`` for ``r > 1``), the width follows at the same aspect,
        and the image is zero-padded at a random offset onto a canvas of ``max(1, r)`` times the input size.
        """
        if torch.rand(1).item() >= self.diversity_prob:
            return x
        height, width = x.shape[-2:]
        canvas_h = max(height, int(height * self.resize_rate))
        canvas_w = max(width, int(width * self.resize_rate))
        low = min(height, int(height * self.resize_rate))
        new_h = int(torch.randint(low, max(low + 1, canvas_h), (1,)).item())
        new_w = min(canvas_w, max(1, round(new_h * width / height)))
        rescaled = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False)
        top = int(torch.randint(0, canvas_h - new_h + 1, (1,)).item())
        left = int(torch.randint(0, canvas_w - new_w + 1, (1,)).item())
        return F.pad(rescaled, [left, canvas_w - new_w - left, top, canvas_h - new_h - top], value=0)


def check_budget(eps: float, alpha: float | None, steps: int) -> None:
    """Raise :class:`ConfigError` unless ``0 <= eps <= 1``, ``alpha > 0`` (``None``: the default,
    :func:`default_alpha`) and ``steps`` is an integer >= 1."""
    if not 0.0 <= eps <= 1.0:
        raise ConfigError(f"eps must be in [0, 1] (pixel scale, e.g. 8/255), got {eps}")
    if alpha is not None and not alpha > 0:
        raise ConfigError(f"alpha (step size) must be > 0, got {alpha}")
    if isinstance(steps, bool) or int(steps) != steps or steps < 1:
        raise ConfigError(f"steps must be an integer >= 1, got {steps}")


def default_alpha(eps: float, steps: int = 10) -> float:
    """The step of the iterative attacks when none is given: ``2.5 * eps / steps`` (Madry et al.'s rule, the
    default of their ``robustness`` library), which is torchattacks' 2/255 for its eps 8/255 and 10 steps, and lets
    fewer steps still cross the eps-ball from PGD's random start (5 steps of 8/255: 4/255 each).  For ``eps = 0``,
    which moves nothing, a positive step all the same (1/255)."""
    return 2.5 * eps / steps if eps > 0 else 1 / 255


def warn_unreachable(method: str, eps: float, alpha: float, steps: int) -> None:
    """Warn, in one line, when an iterative attack's ``steps`` steps of ``alpha`` cannot reach ``eps``
    (it is then weaker than one FGSM step of ``eps``)."""
    if RETRIEVAL_ATTACKS.get(method).iterative and steps * alpha < eps:
        warnings.warn(f"{method}: {steps} steps of {alpha * 255:.3g}/255 cannot reach eps = {eps * 255:.3g}/255, "
                      f"so it is weaker than FGSM; give a step of at least eps / steps (the default is 2.5 eps / steps)",
                      stacklevel=3)


#: ``--method`` name -> attack class, the built-ins in the order of L2RW+'s Table IX.
RETRIEVAL_ATTACKS: Registry[type[FeatureAttack]] = Registry(
    "attack", builtins=lambda: (FeatureFGSM, FeaturePGD, FeatureBIM, FeatureMIFGSM, FeatureTIFGSM))


def register_retrieval_attack(cls: type[FeatureAttack]) -> type[FeatureAttack]:
    """Add a :class:`FeatureAttack` subclass (``privreid attack --method <name>`` then runs it); returns it."""
    return RETRIEVAL_ATTACKS.register(cls)


def unregister_retrieval_attack(name: str) -> None:
    """Remove retrieval attack ``name`` (a test's or a notebook's own); unknown names are refused."""
    RETRIEVAL_ATTACKS.unregister(name)


def build_attack(
    method: str,
    model: torch.nn.Module,
    *,
    eps: float = 8 / 255,
    alpha: float | None = None,
    steps: int = 10,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> FeatureAttack:
    """A feature-space attack on ``model`` that takes ``[0, 1]`` pixels and normalises with ``mean``/``std``.

    ``alpha`` (default :func:`default_alpha`) and ``steps`` are ignored by FGSM (one step of ``eps``); other
    hyper-parameters keep the module docstring's defaults (change them on the returned object). ConfigError:
    unknown ``method``, ``eps`` outside ``[0, 1]``, ``alpha <= 0`` or ``steps < 1``.
    """
    cls = RETRIEVAL_ATTACKS.get(method)
    check_budget(eps, alpha, steps)
    alpha = default_alpha(eps, int(steps)) if alpha is None else alpha
    warn_unreachable(method, eps, alpha, steps)
    attack = cls(model, eps=eps, alpha=alpha, steps=int(steps)) if cls.iterative else cls(model, eps=eps)
    attack.set_normalization_used(mean=list(mean), std=list(std))
    return attack
