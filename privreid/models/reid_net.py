"""The ReID model: ResNet trunk -> neck -> (optional) identity classifier.

Necks:

* ``"linear"`` (default): ``Linear(C, feat_dim)`` then ``BatchNorm1d(feat_dim)``,
  the IDE-style embedding bottleneck that FedReID / FedPav share between
  clients while each client keeps its own classifier.
* ``"bnneck"``: a ``BatchNorm1d(C)`` whose bias is frozen at zero, the BNNeck of
  Luo et al., "Bag of Tricks and a Strong Baseline for Deep Person
  Re-identification" (CVPRW 2019).  The triplet loss sees the feature before the
  BN, the classifier the feature after it; the feature dimension is ``C``.

``forward`` always returns the retrieval feature (the neck output after its BN)
so the model can be handed as is to feature extractors and attack libraries;
training code calls :meth:`ReIDModel.forward_train`.
"""

from __future__ import annotations

import logging
from os import PathLike
from typing import Any

import torch
from torch import nn

from privreid.errors import ConfigError
from privreid.models.resnet import NormFactory, ResNet
from privreid.models.weights import load_imagenet_weights, load_weights_file

NECKS = ("linear", "bnneck")
PRETRAINED = ("imagenet",)

_log = logging.getLogger(__name__)


class LinearNeck(nn.Module):
    """``fc: Linear(in_dim, feat_dim)`` followed by ``bn: BatchNorm1d(feat_dim)``."""

    def __init__(self, in_dim: int, feat_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, feat_dim, bias=True)
        self.bn = nn.BatchNorm1d(feat_dim)
        nn.init.kaiming_normal_(self.fc.weight, mode="fan_out")
        nn.init.zeros_(self.fc.bias)
        nn.init.ones_(self.bn.weight)
        nn.init.zeros_(self.bn.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


class BNNeck(nn.Module):
    """``bn: BatchNorm1d(dim)`` with its bias frozen at zero (Luo et al. 2019)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(dim)
        nn.init.ones_(self.bn.weight)
        nn.init.zeros_(self.bn.bias)
        self.bn.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


HEADS = ("linear", "mlp")


def make_head(kind: str, feat_dim: int, num_classes: int, hidden: int = 512) -> nn.Module:
    """A fresh identity classifier.

    ``linear``: ``Linear(feat_dim, num_classes, bias=False)``, N(0, 0.001^2)
    init as in torchreid.  ``mlp``: FedReID's mapping network (Wu & Gong,
    paper 002, Eq. 7): ``FC -> BN -> ReLU -> Dropout(0.5) -> FC``.
    """
    if kind == "linear":
        head = nn.Linear(feat_dim, num_classes, bias=False)
        nn.init.normal_(head.weight, std=0.001)
        return head
    if kind == "mlp":
        head = nn.Sequential(nn.Linear(feat_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=False),
                             nn.Dropout(0.5), nn.Linear(hidden, num_classes))
        nn.init.normal_(head[4].weight, std=0.001)
        nn.init.zeros_(head[4].bias)
        return head
    raise ConfigError(f"unknown head {kind!r}; choose one of {', '.join(HEADS)}")


class ReIDModel(nn.Module):
    """Backbone + neck + per-client identity classifier.

    Args:
        arch: trunk architecture (``resnet18``, ``resnet34``, ``resnet50``).
        num_classes: classifier size; 0 builds no classifier (evaluation only).
        neck: ``"linear"`` or ``"bnneck"``.
        feat_dim: output size of the linear neck.  With ``"bnneck"`` it is not
            used: the feature dimension is the trunk's ``out_dim``.
        last_stride: stride of ``layer4`` (1 = Luo et al.'s ReID trick).
        norm_layer: norm factory for the trunk (default BatchNorm2d).  It is
            not part of :meth:`model_config`.
        head: classifier kind, see :func:`make_head`.

    Attributes:
        backbone, neck, classifier (``None`` when ``num_classes == 0``);
        arch, neck_kind, feat_dim (the actual retrieval feature size), last_stride.
    """

    def __init__(
        self,
        arch: str = "resnet18",
        num_classes: int = 0,
        neck: str = "linear",
        feat_dim: int = 512,
        last_stride: int = 1,
        norm_layer: NormFactory | None = None,
        head: str = "linear",
    ) -> None:
        super().__init__()
        if head not in HEADS:
            raise ConfigError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
        self.head_kind = head
        if neck not in NECKS:
            raise ConfigError(f"unknown neck {neck!r}; choose one of {', '.join(NECKS)}")
        self.backbone = ResNet(arch, last_stride=last_stride, norm_layer=norm_layer)
        self.arch = arch
        self.last_stride = last_stride
        self.neck_kind = neck
        if neck == "linear":
            if feat_dim <= 0:
                raise ConfigError(f"feat_dim must be positive, got {feat_dim}")
            self.neck: nn.Module = LinearNeck(self.backbone.out_dim, feat_dim)
            self.feat_dim = feat_dim
        else:
            self.neck = BNNeck(self.backbone.out_dim)
            self.feat_dim = self.backbone.out_dim
        self.classifier: nn.Module | None = None
        self._num_classes = 0
        self.reset_classifier(num_classes)

    @property
    def num_classes(self) -> int:
        return self._num_classes

    def reset_classifier(self, num_classes: int) -> None:
        """Replace the head by a fresh one of kind ``head`` (:func:`make_head`).

        ``num_classes=0`` removes the head.  The new head lives on the neck's
        device and dtype.
        """
        if num_classes < 0:
            raise ConfigError(f"num_classes must be >= 0, got {num_classes}")
        self._num_classes = num_classes
        if num_classes == 0:
            self.classifier = None
            return
        ref = next(self.neck.parameters())
        self.classifier = make_head(self.head_kind, self.feat_dim, num_classes).to(ref.device, ref.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Retrieval feature ``(B, feat_dim)``: the neck output after its BatchNorm."""
        return self.neck(self.backbone(x))

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(pre_neck_feat, feat, logits)``.

        ``pre_neck_feat`` is the pooled trunk feature ``(B, out_dim)`` (for the
        triplet loss), ``feat`` the neck output ``(B, feat_dim)``, ``logits``
        the classifier output ``(B, num_classes)``.
        """
        if self.classifier is None:
            raise ConfigError(
                "forward_train needs a classifier but this model has num_classes=0; "
                "call reset_classifier(num_classes) first"
            )
        pre = self.backbone(x)
        feat = self.neck(pre)
        return pre, feat, self.classifier(feat)

    def model_config(self) -> dict[str, Any]:
        """Keyword arguments for :func:`build_model` that rebuild this architecture."""
        return {
            "arch": self.arch,
            "num_classes": self.num_classes,
            "neck": self.neck_kind,
            "feat_dim": self.feat_dim,
            "last_stride": self.last_stride,
            "head": self.head_kind,
        }


def build_model(
    arch: str = "resnet18",
    num_classes: int = 0,
    neck: str = "linear",
    feat_dim: int = 512,
    last_stride: int = 1,
    norm_layer: NormFactory | None = None,
    pretrained: str | None = None,
    weights: str | PathLike[str] | None = None,
    head: str = "linear",
) -> ReIDModel:
    """Build a :class:`ReIDModel`, optionally initialised from weights.

    Args:
        pretrained: ``"imagenet"`` loads torchvision's IMAGENET1K_V1 weights
            into the trunk (needs internet or torch hub's cache).
        weights: path of a local state dict (trunk-style or full-model style,
            see :func:`privreid.models.weights.load_weights_file`); the offline
            alternative to ``pretrained``.

    Other arguments as in :class:`ReIDModel`.  Raises ConfigError for unknown
    arch / neck / pretrained values, when both ``pretrained`` and ``weights``
    are given, and for weights that cannot be obtained or do not fit.
    """
    if pretrained is not None and pretrained not in PRETRAINED:
        raise ConfigError(f"unknown pretrained weights {pretrained!r}; choose one of {', '.join(PRETRAINED)}")
    if pretrained is not None and weights is not None:
        raise ConfigError("give either pretrained or weights, not both")
    model = ReIDModel(arch, num_classes, neck, feat_dim, last_stride, norm_layer, head)
    if pretrained is not None:
        loaded = load_imagenet_weights(model.backbone)
        _log.info("loaded %d ImageNet tensors into the %s trunk", len(loaded), arch)
    elif weights is not None:
        loaded = load_weights_file(model, weights)
        _log.info("loaded %d tensors from %s", len(loaded), weights)
    return model
