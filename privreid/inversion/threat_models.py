"""What the server observes of a client's training step.

The client's step: its model in **eval mode** (BatchNorm with running
statistics, dropout off, as in Geiping et al.'s evaluation; a BatchNorm1d neck
cannot train on a single image anyway), one image ``x`` with its client label
``y`` (or a batch of ``B`` images with their labels, ``privreid invert
--batch``: the mean loss), the run's identity loss (cross-entropy with the
recorded label smoothing), and the gradient of every trainable parameter the
loss reaches.  With ``local_steps`` T > 1 the client takes T SGD steps at
``local_lr`` on its batch before it uploads, as a FedPav or FedReID client
does in a local epoch; the server then observes the averaged update
``(theta_0 - theta_T) / (local_lr T)`` (:func:`local_update`), which is the
gradient itself for T = 1.  Batches and local steps are attacked under the
``full`` threat model (:attr:`ThreatModel.client_steps`); the shared threat
models' exact surrogates hold for one image and one step.

Threat models (``THREATS``, a registry of :class:`ThreatModel` objects; a new
one is a subclass and one :func:`register_threat`):

* ``"full"``: the whole gradient, classifier head included, is observed: the
  setting of DLG / iDLG and of L2RW+'s Fig. 8 (paper 003).
* ``"shared"``: only the shared keys of the method's parameter policy (the
  checkpoint's ``global_state``; the head and other local layers stay on the
  client), the realistic federated ReID case.  The attacker does not know the
  head, so it cannot evaluate the client's loss; but the shared bottleneck
  ``neck.fc`` (``Linear(C, d)`` with bias, followed by ``BatchNorm1d``) hands
  it the upstream gradient exactly: ``dL/d neck.fc.bias = dL/dz`` with
  ``z = neck.fc(pool(trunk(x)))``.  The trunk's gradient is ``J_z(x)^T dL/dz``,
  so the surrogate ``<z(x'), dL/dz>`` has the client's trunk and ``neck.fc``
  gradients at ``x' = x`` (:func:`shared_surrogate_loss`).  ``neck.bn`` sits
  after the leak point and is not matched.  Exact only when ``z`` is the
  trunk's only path to the loss: models with FedARKS' part branch are refused.
* ``"shared-feature"``: the same observation, attacked through the exact
  feature leak of the bottleneck: for one image ``dL/dW_i = (dL/dz_i) h`` and
  ``dL/db_i = dL/dz_i``, so every row ``i`` with ``dL/db_i != 0`` gives the
  pooled trunk feature ``h = dL/dW_i / dL/db_i`` (docs/architecture.md, "Gradient
  inversion").  :func:`leak_bottleneck_feature` takes the least-squares
  combination of all rows, exact without noise and the best linear estimate
  under it; the image is then recovered by feature inversion.

  The BNNeck (``neck="bnneck"``) has no linear layer and its BN bias is frozen:
  it leaks ``dL/df * xhat`` only, and the two shared threat models refuse it.
* ``"aggregate"``: what a server under secure aggregation sees, the sum of
  ``--clients m`` clients' shared one-image updates, attacked like
  ``shared-feature`` (:class:`AggregateThreat`; the campaign that builds the
  sums is :mod:`.aggregate`).

The attacker is assumed to know every non-head parameter of the client's model,
local normalisation layers (SKA, FedBN) included: the strongest server, an
upper bound on leakage.  Defenses (:mod:`.defenses`) act on the client's side
before the observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torchvision.transforms.functional as TF
from torch import nn

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from privreid.errors import ConfigError
from privreid.registry import Registry
from privreid.models.reid_net import CLASSIFIER_PREFIX

from privreid.inversion.defenses import NO_DEFENSE, Defense, Gradients, defend_gradient, noisy_download
from privreid.inversion.labels import bias_count_labels, bias_sign_label, matched_sign_label, norm_count_labels

#: the shared bottleneck Linear layer of privreid's linear neck (:class:`privreid.models.reid_net.LinearNeck`)
BOTTLENECK = "neck.fc"


def to_model_input(images: torch.Tensor) -> torch.Tensor:
    """``[0, 1]`` pixels ``(B, 3, H, W)`` -> ImageNet-normalised model input (differentiable)."""
    return TF.normalize(images, list(IMAGENET_MEAN), list(IMAGENET_STD))


class ThreatModel:
    """What the server observes of a client's step and how an attacker reconstructs the image from it.

    ``name`` is the ``--threat`` value and ``summary`` its one-line help.
    Subclasses say which gradients are observed (:meth:`visible`), refuse the
    models they cannot be applied to (:meth:`check`), which observed gradients
    a gradient-matching attack compares (:meth:`matched_names`) and how the
    reconstruction runs (:meth:`reconstruct`).  ``needs_shared``: the threat
    observes the shared upload only, so a method that shares nothing cannot be attacked.
    ``single_upload``: the observation is one client's upload (False: a sum of several).
    """

    name: str = ""
    summary: str = ""
    needs_shared: bool = True
    single_upload: bool = True
    #: the threat attacks batches of images and multi-step local updates (else one image's one-step gradient)
    client_steps: bool = False

    def check_options(self, *, image, clients) -> None:
        """Refuse campaign options this threat cannot take (before any work): ``--clients`` is the aggregate's."""
        if clients:
            raise ConfigError("--clients is for --threat aggregate")

    def campaign(self, paths, out, *, settings, client=None, index=None, image=None, label=None, n=1, clients=None,
                 defended=True, seed=0, device="cpu", progress=True):
        """Attack the checkpoints ``paths`` under this threat (``privreid invert``): a :class:`CampaignResult`."""
        from privreid.inversion.campaign import invert_checkpoints

        self.check_options(image=image, clients=clients)
        return invert_checkpoints(paths, out, settings=settings, client=client, index=index, image=image,
                                  label=label, n=n, threat=self.name, defended=defended, seed=seed, device=device,
                                  progress=progress)

    def check(self, model: nn.Module, shared: set[str]) -> None:
        """Raise :class:`ConfigError` with the reason when ``model`` cannot be attacked under this threat."""

    def visible(self, grads: Gradients, shared: set[str]) -> Gradients:
        """The part of the client's (defended) gradient the attacker observes: the shared keys by default."""
        return {n: g for n, g in grads.items() if n in shared}

    def matched_names(self, grads: Gradients) -> list[str]:
        raise ConfigError(f"threat {self.name!r} is attacked by feature inversion, not gradient matching")

    def reconstruct(self, model: nn.Module, observation: "Observation", start: torch.Tensor, *, settings,
                    loss_fn: nn.Module, label_smoothing: float, generator: torch.Generator,
                    progress: bool) -> tuple[torch.Tensor, int | None, str | None]:
        """``(image (1, 3, H, W) in [0, 1], inferred label or None, label rule or None)``."""
        raise NotImplementedError


def _check_bottleneck(model: nn.Module, threat: str, shared: set[str]) -> None:
    """The shared threat models read the linear neck's bottleneck, which must be shared."""
    if not hasattr(getattr(model, "neck", None), "fc"):
        raise ConfigError(f"threat {threat!r} needs the linear neck's bottleneck layer {BOTTLENECK}; "
                          f"this model's neck is {getattr(model, 'neck_kind', '?')!r} (use --threat full)")
    missing = [f"{BOTTLENECK}.{p}" for p in ("weight", "bias") if f"{BOTTLENECK}.{p}" not in shared]
    if missing:
        raise ConfigError(f"threat {threat!r} needs {', '.join(missing)} among the shared parameters, but the "
                          "method keeps them on the client (use --threat full)")


class FullGradient(ThreatModel):
    """The whole gradient, head included (DLG / iDLG; L2RW+ Fig. 8): the attack infers or optimises the label."""

    name = "full"
    summary = "whole gradient, head included"
    needs_shared = False
    client_steps = True

    def visible(self, grads: Gradients, shared: set[str]) -> Gradients:
        return grads

    def matched_names(self, grads: Gradients) -> list[str]:
        return list(grads)

    def reconstruct(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        return settings.inversion_attack.invert_full(model, observation, start, settings=settings, loss_fn=loss_fn,
                                                     label_smoothing=label_smoothing, generator=generator,
                                                     progress=progress)


class SharedGradient(ThreatModel):
    """The shared keys only, attacked through the bottleneck's upstream gradient (:func:`shared_surrogate_loss`)."""

    name = "shared"
    summary = "shared keys only"

    def check(self, model: nn.Module, shared: set[str]) -> None:
        _check_bottleneck(model, self.name, shared)
        if getattr(model, "part", None) is not None:
            raise ConfigError("threat 'shared' needs the neck to be the trunk's only path to the loss; this model "
                              "has a part branch (use --threat shared-feature)")

    def matched_names(self, grads: Gradients) -> list[str]:
        """The trunk and the bottleneck: the parameters the surrogate loss reaches."""
        return [n for n in grads if n.startswith(("backbone.", f"{BOTTLENECK}."))]

    def reconstruct(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        from privreid.inversion.optimise import invert_shared_gradients

        return invert_shared_gradients(model, observation, start, settings=settings, progress=progress), None, None


class SharedFeature(ThreatModel):
    """The shared keys, attacked through the bottleneck's exact feature leak, then feature inversion."""

    name = "shared-feature"
    summary = "the bottleneck's exact feature leak, then feature inversion"

    def check(self, model: nn.Module, shared: set[str]) -> None:
        _check_bottleneck(model, self.name, shared)

    def reconstruct(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        from privreid.inversion.optimise import invert_feature

        feature = leak_bottleneck_feature(observation.grads)
        return invert_feature(model, feature, start, settings=settings, progress=progress), None, None


class AggregateThreat(SharedFeature):
    """The sum of ``m`` clients' shared one-image updates (secure aggregation's server), attacked as ``shared-feature``.

    One observation is a sum of ``shared-feature`` observations
    (:func:`.aggregate.aggregate_observation`); its bottleneck leak is then a
    mixture of the ``m`` pooled features.  The campaign
    (:func:`.aggregate.invert_aggregate`) attacks one row per ``m`` next to
    the single-upload reference.
    """

    name = "aggregate"
    single_upload = False
    summary = ("the sum of --clients m clients' shared updates (what a server under secure aggregation sees), "
               "through the bottleneck's feature leak")

    def check_options(self, *, image, clients) -> None:
        from privreid.inversion.aggregate import parse_clients

        if image is not None:
            raise ConfigError("--threat aggregate attacks dataset subjects (--index, --subjects), not --image")
        parse_clients(clients)

    def campaign(self, paths, out, *, settings, client=None, index=None, image=None, label=None, n=1, clients=None,
                 defended=True, seed=0, device="cpu", progress=True):
        from privreid.inversion.aggregate import invert_aggregate, parse_clients

        self.check_options(image=image, clients=clients)
        return invert_aggregate(paths, out, settings=settings, clients=parse_clients(clients), client=client,
                                index=index, n=n, defended=defended, seed=seed, device=device, progress=progress)


#: ``--threat`` name -> threat model, in ``--help`` order
THREATS: Registry[ThreatModel] = Registry(
    "threat model", builtins=lambda: (FullGradient(), SharedGradient(), SharedFeature(), AggregateThreat()))


def register_threat(threat: ThreatModel) -> ThreatModel:
    """Add ``threat`` to :data:`THREATS` (``--threat <name>`` then selects it everywhere); returns it."""
    return THREATS.register(threat)


def unregister_threat(name: str) -> None:
    """Remove threat model ``name`` (a test's or a notebook's own); unknown names are refused."""
    THREATS.unregister(name)


def get_threat(threat: str) -> ThreatModel:
    """The registered threat model ``threat``; :class:`ConfigError` listing the choices otherwise."""
    return THREATS.get(threat)


def check_threat(threat: str) -> None:
    """:class:`ConfigError` listing the choices unless ``threat`` is registered."""
    THREATS.get(threat)


def threats_help() -> str:
    """``--threat``'s help: every registered threat model with its summary."""
    return "; ".join(f"{name}: {t.summary}" for name, t in THREATS.items())


def check_model(model: nn.Module, threat: str, shared: set[str]) -> None:
    """Refuse a model the threat model cannot be applied to, with the reason."""
    model_threat = get_threat(threat)
    if getattr(model, "classifier", None) is None:
        raise ConfigError("the client's training step needs its classifier head; this model has none "
                          "(load it with the client whose step is attacked)")
    model_threat.check(model, shared)


def _batch(images: torch.Tensor, labels) -> tuple[torch.Tensor, list[int]]:
    """``(B, 3, H, W)`` images and ``B`` labels from one image and its label or from a batch and its labels."""
    if images.ndim == 3:
        return images[None], [int(labels)]
    labels = [int(y) for y in labels]
    if images.ndim != 4 or len(labels) != len(images):
        raise ConfigError(f"a batch is (B, 3, H, W) images with B labels; got {tuple(images.shape)} and "
                          f"{len(labels)} label(s)")
    return images, labels


def _client_loss(model: nn.Module, images: torch.Tensor, labels, loss_fn: nn.Module) -> torch.Tensor:
    images, labels = _batch(images, labels)
    logits = model.forward_train(to_model_input(images))[2]
    return loss_fn(logits, torch.tensor(labels, device=logits.device))


class _Evaluate(nn.Module):
    """``model`` as a submodule, ``forward()`` = ``loss()``: what :func:`torch.func.functional_call` re-parametrises."""

    def __init__(self, model: nn.Module, loss) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self) -> torch.Tensor:
        return self.loss()


def local_update(model: nn.Module, names: list[str], loss, steps: int, lr: float, *,
                 create_graph: bool = False) -> list[torch.Tensor]:
    """``(theta_0 - theta_T) / (lr T)`` for the parameters ``names`` after ``T = steps`` SGD steps on ``loss()``
    (a function evaluated with the current parameters), in ``names`` order: the one-step gradient for T = 1.

    ``create_graph``: the update stays differentiable in whatever ``loss``
    depends on (the attacker's dummy batch: simulating the local steps).
    """
    from torch.func import functional_call

    params = dict(model.named_parameters())
    current = {n: params[n] for n in names}
    wrapper = _Evaluate(model, loss)
    for _ in range(steps):
        value = functional_call(wrapper, {f"model.{n}": p for n, p in current.items()}, ())
        grads = torch.autograd.grad(value, list(current.values()), create_graph=create_graph)
        current = {n: p - lr * g for (n, p), g in zip(current.items(), grads)}
    return [(params[n] - current[n]) / (lr * steps) for n in names]


def parameter_gradients(loss: torch.Tensor, model: nn.Module, names: list[str], *,
                        create_graph: bool = False) -> list[torch.Tensor]:
    """``d loss / d p`` for the named parameters of ``model``, in ``names`` order."""
    params = dict(model.named_parameters())
    return list(torch.autograd.grad(loss, [params[n] for n in names], create_graph=create_graph))


def client_gradient(model: nn.Module, image: torch.Tensor, label, loss_fn: nn.Module, *, local_steps: int = 1,
                    local_lr: float = 0.01) -> Gradients:
    """The gradient of the client's step (eval mode) on one image ``(3, H, W)`` with its label, or on a batch
    ``(B, 3, H, W)`` with its labels, for every trainable parameter it reaches; with ``local_steps`` > 1 the
    averaged update of that many SGD steps at ``local_lr`` (:func:`local_update`).

    Parameters the loss does not reach (SKA's idle generalised norm copies)
    get no entry.
    """
    model.eval()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(_client_loss(model, image, label, loss_fn), [p for _, p in named],
                                allow_unused=True)
    observed = {n: g.detach() for (n, _), g in zip(named, grads) if g is not None}
    if local_steps == 1:
        return observed
    update = local_update(model, list(observed), lambda: _client_loss(model, image, label, loss_fn), local_steps,
                          local_lr)
    return {n: u.detach() for n, u in zip(observed, update)}


@dataclass
class Observation:
    """What the attacker sees: the threat model and the observed gradients (after defenses)."""

    threat: str
    grads: Gradients
    #: images in the observed step
    batch: int = 1


def observe(model: nn.Module, image: torch.Tensor, label, *, threat: str, shared: set[str],
            loss_fn: nn.Module, defense: Defense = NO_DEFENSE, generator: torch.Generator | None = None,
            local_steps: int = 1, local_lr: float = 0.01) -> Observation:
    """The client's step on ``image`` (``(3, H, W)`` in ``[0, 1]`` with its label, or a batch ``(B, 3, H, W)``
    with its labels; ``local_steps`` SGD steps at ``local_lr``) as the attacker observes it.

    Defenses: the victim computes its step on the noisy download (Eq. 15), the
    whole gradient is clipped and noised (DP, Eq. 14), then the threat model's
    part of it is observed.  ``shared`` names the shared parameters.
    """
    check_model(model, threat, shared)
    batch = 1 if image.ndim == 3 else len(image)
    if (batch > 1 or local_steps > 1) and not get_threat(threat).client_steps:
        raise ConfigError(f"threat {threat!r} attacks one image's one-step update; batches (--batch) and local "
                          "steps (--local-steps) are attacked under --threat full")
    victim = noisy_download(model, shared, defense.download_beta, generator) if defense.download_beta > 0 \
        else model
    grads = client_gradient(victim, image, label, loss_fn, local_steps=local_steps, local_lr=local_lr)
    if defense.active:
        grads = defend_gradient(grads, beta=defense.beta, clip_norm=defense.clip_norm,
                                noise_multiplier=defense.noise_multiplier, generator=generator)
    return Observation(threat, THREATS[threat].visible(grads, shared), batch)


def leak_bottleneck_feature(grads: Gradients, layer: str = BOTTLENECK) -> torch.Tensor:
    """The input of ``layer`` (a Linear with bias) from its gradients: ``h = sum_i b_i W_i / sum_i b_i^2``.

    ``W_i`` is row ``i`` of the weight gradient and ``b_i`` the bias gradient.
    For one image ``W_i = b_i h``, so this is exactly ``h``; with noise it is
    the least-squares estimate.
    """
    try:
        weight, bias = grads[f"{layer}.weight"], grads[f"{layer}.bias"]
    except KeyError as exc:
        raise ConfigError(f"the observation has no gradient of {exc.args[0]}; the feature leak needs it") from None
    denom = (bias.double() ** 2).sum()
    if float(denom) == 0.0:
        raise ConfigError(f"the bias gradient of {layer} is zero: the step carries no feature information")
    return ((bias.double() @ weight.double()) / denom).to(weight.dtype)


def shared_surrogate_loss(model: nn.Module, images: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    """``<neck.fc(pool(trunk(x))), dL/dz>``: its trunk and bottleneck gradients equal the client's at ``x``."""
    z = model.neck.fc(model.backbone(to_model_input(images)))
    return (z * upstream).sum()


def head_last_linear(model: nn.Module) -> tuple[str, nn.Linear]:
    """The classifier's last Linear layer and its parameter-name prefix."""
    found = [((CLASSIFIER_PREFIX + n).rstrip("."), m) for n, m in model.classifier.named_modules()
             if isinstance(m, nn.Linear)]
    if not found:
        raise ConfigError("the classifier head has no Linear layer to infer a label from")
    return found[-1]


def infer_labels(model: nn.Module, observation: Observation, label_smoothing: float = 0.0) -> tuple[list[int], str]:
    """The labels of the observed batch (:attr:`Observation.batch` of them, sorted): ``(labels, rule)``.

    One image: :func:`infer_label`.  A batch: the count rules of
    :mod:`.labels`, from the bias gradient where the head's last layer has a
    bias (:func:`.labels.bias_count_labels`), else from the weight gradient's
    row norms (:func:`.labels.norm_count_labels`).
    """
    if observation.batch == 1:
        label, rule = infer_label(model, observation, label_smoothing)
        return [label], rule
    if observation.threat != "full":
        raise ConfigError("labels are inferred from the head's gradient, observed only under --threat full")
    prefix, layer = head_last_linear(model)
    grads = observation.grads
    if layer.bias is not None and f"{prefix}.bias" in grads:
        return bias_count_labels(grads[f"{prefix}.bias"], observation.batch), "bias count"
    return norm_count_labels(grads[f"{prefix}.weight"], observation.batch), "weight-row norm count"


def infer_label(model: nn.Module, observation: Observation, label_smoothing: float = 0.0) -> tuple[int, str]:
    """The client's label from a full observation: ``(label, rule)``.

    The bias-gradient sign rule when the head's last layer has a bias (FedReID's
    mapping network); otherwise iDLG's rule with the sign of the head input's
    sum chosen by gradient matching (:func:`.labels.matched_sign_label`, with
    the run's ``label_smoothing``), which needs no assumption on that sign: a
    BNNeck's or a linear neck's BatchNorm-ed embedding can sum to either.
    """
    if observation.threat != "full":
        raise ConfigError("labels are inferred from the head's gradient, observed only under --threat full")
    prefix, layer = head_last_linear(model)
    grads = observation.grads
    if layer.bias is not None and f"{prefix}.bias" in grads:
        return bias_sign_label(grads[f"{prefix}.bias"]), "bias-sign"
    return (matched_sign_label(grads[f"{prefix}.weight"], layer.weight, label_smoothing),
            "idlg (sign by gradient matching)")
