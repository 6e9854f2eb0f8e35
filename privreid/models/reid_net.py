"""The base ReID model: ResNet trunk -> neck -> (optional) linear identity classifier.

Necks: ``"linear"`` (default): ``Linear(C, feat_dim)`` + ``BatchNorm1d``, the IDE-style bottleneck FedReID /
FedPav share; ``"bnneck"``: ``BatchNorm1d(C)`` with its bias frozen at zero, Luo et al.'s BNNeck ("Bag of Tricks
...", CVPRW 2019; the triplet loss sees the feature before the BN, the classifier after); ``"none"``: the pooled
trunk feature, as Wu & Gong's code retrieves with FedReID and SKA (FedReid ``lib/model.py``,
``embedding_net_test``), their mapping network then the classifier (``mlp_head``).

``forward`` returns the retrieval feature, so the model goes as is to feature extractors and attack libraries;
training calls :meth:`ReIDModel.forward_train`. ``dropout=p``: ``nn.Dropout(p)`` before the classifier only
(FedPav's cap-ntu/FedReID: 0.5 after the bottleneck's BN). Method-specific architecture is added by model
transforms (:mod:`privreid.models.transforms`), which the model keeps and records in
:meth:`ReIDModel.model_config`; :func:`privreid.models.build_model` composes it all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from privreid.config import NECKS
from privreid.errors import ConfigError
from privreid.models.part_branch import fuse
from privreid.models.resnet import NormFactory, ResNet


#: ``(feat_dim, num_classes) -> a fresh identity classifier``
HeadFactory = Callable[[int, int], nn.Module]


class LinearNeck(nn.Module):
    """``fc: Linear(in_dim, feat_dim)`` followed by ``bn: BatchNorm1d(feat_dim)``."""

    def __init__(self, in_dim: int, feat_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, feat_dim, bias=True)
        self.bn = nn.BatchNorm1d(feat_dim)
        nn.init.kaiming_normal_(self.fc.weight, mode="fan_out")
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


class BNNeck(nn.Module):
    """``bn: BatchNorm1d(dim)`` with its bias frozen at zero (Luo et al. 2019)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(dim)  # weight 1, bias 0
        self.bn.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


#: state-dict prefix of the identity classifier (:attr:`ReIDModel.classifier`), the head every method keeps
#: per client (its label space is the client's); the one place this name is spelled
CLASSIFIER_PREFIX = "classifier."


def is_classifier_key(key: str) -> bool:
    """Whether the state-dict key ``key`` of a :class:`ReIDModel` belongs to its identity classifier."""
    return key.startswith(CLASSIFIER_PREFIX)


def linear_head(feat_dim: int, num_classes: int) -> nn.Module:
    """The base identity classifier: ``Linear(feat_dim, num_classes, bias=False)``, N(0, 0.001^2) init (torchreid)."""
    head = nn.Linear(feat_dim, num_classes, bias=False)
    nn.init.normal_(head.weight, std=0.001)
    return head


class ReIDModel(nn.Module):
    """Backbone + neck + per-client identity classifier.

    ``arch``: ``resnet18`` / ``34`` / ``50``; ``num_classes`` 0 builds no classifier; ``feat_dim``: the linear
    neck's size (other necks: the trunk's ``out_dim``); ``last_stride`` 1 is Luo et al.'s trick; ``norm_layer``:
    the trunk's norm factory (not in :meth:`model_config`); ``dropout``: on the classifier's input.
    Attributes beyond these: ``head_factory`` (:func:`linear_head`, or ``mlp_head``'s), ``part`` (FedARKS' part
    branch, whose fused theta of Eq. 1 is then the feature) and ``transforms`` (applied, in order).
    """

    def __init__(
        self,
        arch: str = "resnet18",
        num_classes: int = 0,
        neck: str = "linear",
        feat_dim: int = 512,
        last_stride: int = 1,
        norm_layer: NormFactory | None = None,
        *,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout must lie in [0, 1), got {dropout}")
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
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
            self.neck = BNNeck(self.backbone.out_dim) if neck == "bnneck" else nn.Identity()
            self.feat_dim = self.backbone.out_dim
        self.head_factory: HeadFactory = linear_head
        self.part: nn.Module | None = None
        self.transforms: list[Any] = []
        self.classifier: nn.Module | None = None
        self._num_classes = 0
        self.reset_classifier(num_classes)

    @property
    def num_classes(self) -> int:
        return self._num_classes

    def has_transform(self, name: str) -> bool:
        """Whether the model transform ``name`` (e.g. ``"part_branch"``) was applied to this model."""
        return any(t.name == name for t in self.transforms)

    def new_head(self, num_classes: int) -> nn.Module:
        """A fresh classifier as :meth:`reset_classifier` installs it: :attr:`head_factory`, on the trunk's
        device and dtype, adapted by every applied transform (``group_norm`` turns its BatchNorm into GroupNorm)."""
        ref = next(self.backbone.parameters())
        head = self.head_factory(self.feat_dim, num_classes).to(ref.device, ref.dtype)
        for transform in self.transforms:
            head = transform.adapt_head(head)
        return head

    def reset_classifier(self, num_classes: int) -> None:
        """Replace the head by a fresh one (:meth:`new_head`); ``num_classes=0`` removes it."""
        if num_classes < 0:
            raise ConfigError(f"num_classes must be >= 0, got {num_classes}")
        self._num_classes = num_classes
        self.classifier = None if num_classes == 0 else self.new_head(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Retrieval feature ``(B, feat_dim)``: the neck output (the pooled feature with ``"none"``); with a part
        branch, the fused theta of FedARKS Eq. 1."""
        if self.part is None:
            return self.neck(self.backbone(x))
        return self._fused(x)[1]

    def _fused(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(global pooled trunk feature, theta)`` with the part branch."""
        fmap = self.backbone.feature_map(x)
        pre = torch.flatten(self.backbone.avgpool(fmap), 1)
        feat = self.neck(pre)
        v = self.part.fusion_weight
        if float(v) == 1.0:
            return pre, feat
        return pre, fuse(feat, self.part(fmap), v)

    def classify(self, feat: torch.Tensor) -> torch.Tensor:
        """Identity logits of the feature ``feat``: dropout (training mode, if configured), then the classifier."""
        if self.classifier is None:
            raise ConfigError(
                "this model has no classifier (num_classes=0); call reset_classifier(num_classes) first"
            )
        return self.classifier(feat if self.dropout is None else self.dropout(feat))

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(pre_neck_feat, feat, logits)``: the pooled trunk feature (triplet loss), the neck output and the
        classifier output (:meth:`classify`). With a part branch (FedARKS Eq. 2): ``(theta, theta,
        classifier(theta))``."""
        if self.classifier is None:
            raise ConfigError(
                "forward_train needs a classifier but this model has num_classes=0; "
                "call reset_classifier(num_classes) first"
            )
        if self.part is not None:
            theta = self._fused(x)[1]
            return theta, theta, self.classify(theta)
        pre = self.backbone(x)
        feat = self.neck(pre)
        return pre, feat, self.classify(feat)

    def model_config(self) -> dict[str, Any]:
        """What :func:`privreid.models.build_from_config` rebuilds this from: the base arguments (``dropout``
        only when set) and ``transforms``, one ``{"name": ..., **parameters}`` each, in order."""
        return {
            "arch": self.arch,
            "num_classes": self.num_classes,
            "neck": self.neck_kind,
            "feat_dim": self.feat_dim,
            "last_stride": self.last_stride,
            **({"dropout": self.dropout.p} if self.dropout is not None else {}),
            "transforms": [t.to_config() for t in self.transforms],
        }
