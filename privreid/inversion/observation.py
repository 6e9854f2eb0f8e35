"""The client's training step and what its gradient leaks, whatever the server observes of it.

The step: the client's model in **eval mode** (running BatchNorm statistics, no dropout, as Geiping et al.'s
evaluation; a BatchNorm1d neck cannot train on one image), one image with its client label or a batch (``--batch``,
mean loss), the run's identity loss with its label smoothing, and the gradient of every trainable parameter it
reaches (:func:`client_gradient`). With ``local_steps`` T > 1 the client takes T SGD steps at ``local_lr``, as a
FedPav or FedReID local epoch, and the server observes ``(theta_0 - theta_T) / (local_lr T)``
(:func:`local_update`). What leaks from an :class:`Observation`: the label (:func:`infer_labels`), the
bottleneck's upstream gradient (:func:`shared_surrogate_loss`) and its input (:func:`leak_bottleneck_feature`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torchvision.transforms as T
import torchvision.transforms.functional as TF
from torch import nn

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from privreid.errors import ConfigError
from privreid.models.reid_net import CLASSIFIER_PREFIX

from privreid.inversion.defenses import Gradients
from privreid.inversion.labels import bias_count_labels, bias_sign_label, matched_sign_label, norm_count_labels

#: the shared bottleneck Linear layer of privreid's linear neck (:class:`privreid.models.reid_net.LinearNeck`)
BOTTLENECK = "neck.fc"


def to_model_input(images: torch.Tensor) -> torch.Tensor:
    """``[0, 1]`` pixels ``(B, 3, H, W)`` -> ImageNet-normalised model input (differentiable)."""
    return TF.normalize(images, list(IMAGENET_MEAN), list(IMAGENET_STD))


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
    """``(theta_0 - theta_T) / (lr T)`` for the parameters ``names`` after ``T = steps`` SGD steps on ``loss()``,
    in ``names`` order (the gradient for T = 1); ``create_graph`` keeps it differentiable in the dummy batch."""
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
    """The gradient of the client's step (eval mode) on one image ``(3, H, W)`` or a batch with its labels, for
    every trainable parameter it reaches (SKA's idle norm copies get no entry); with ``local_steps`` > 1 the
    averaged update (:func:`local_update`)."""
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


def leak_bottleneck_feature(grads: Gradients, layer: str = BOTTLENECK) -> torch.Tensor:
    """The input of ``layer`` (a Linear with bias) from its gradients: ``h = sum_i b_i W_i / sum_i b_i^2`` (``W_i``
    the weight gradient's row, ``b_i`` the bias gradient): exact for one image (``W_i = b_i h``), least squares
    under noise."""
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


def surrogate_names(grads: Gradients) -> list[str]:
    """The observed parameters :func:`shared_surrogate_loss` reaches, the ones it matches: the trunk and the
    bottleneck."""
    return [n for n in grads if n.startswith(("backbone.", f"{BOTTLENECK}."))]


def head_last_linear(model: nn.Module) -> tuple[str, nn.Linear]:
    """The classifier's last Linear layer and its parameter-name prefix."""
    found = [((CLASSIFIER_PREFIX + n).rstrip("."), m) for n, m in model.classifier.named_modules()
             if isinstance(m, nn.Linear)]
    if not found:
        raise ConfigError("the classifier head has no Linear layer to infer a label from")
    return found[-1]


def infer_labels(model: nn.Module, observation: Observation, label_smoothing: float = 0.0) -> tuple[list[int], str]:
    """The observed batch's labels, sorted: ``(labels, rule)``, from a full observation. One image: the
    bias-gradient sign rule when the head's last layer has a bias (FedReID's mapping network), else iDLG's rule
    with the sign chosen by gradient matching (:func:`.labels.matched_sign_label`), since a BatchNorm-ed
    embedding can sum to either sign. A batch: the count rules of :mod:`.labels` on the bias gradient
    (:func:`.labels.bias_count_labels`) or, without a bias, on the weight gradient's row norms
    (:func:`.labels.norm_count_labels`)."""
    if observation.threat != "full":
        raise ConfigError("labels are inferred from the head's gradient, observed only under --threat full")
    prefix, layer = head_last_linear(model)
    grads, batch = observation.grads, observation.batch
    if layer.bias is not None and f"{prefix}.bias" in grads:
        bias = grads[f"{prefix}.bias"]
        return ([bias_sign_label(bias)], "bias-sign") if batch == 1 else (bias_count_labels(bias, batch), "bias count")
    if batch == 1:
        return ([matched_sign_label(grads[f"{prefix}.weight"], layer.weight, label_smoothing)],
                "idlg (sign by gradient matching)")
    return norm_count_labels(grads[f"{prefix}.weight"], batch), "weight-row norm count"


def to_unit_tensor(pil_image, height: int, width: int) -> torch.Tensor:
    """An image as the attacks' subjects are: resized to ``height`` x ``width``, values in [0, 1]."""
    return T.Compose([T.Resize((height, width)), T.ToTensor()])(pil_image)
