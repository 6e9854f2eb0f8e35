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

Dropout (``dropout=p``): ``nn.Dropout(p)`` on the feature before the identity
classifier (:meth:`ReIDModel.classify`), active in training mode only; the
retrieval feature never passes through it.  FedPav's reference code
(cap-ntu/FedReID) drops 0.5 after the 512-d bottleneck's BatchNorm.

Part branch (``part_branch=True``, FedARKS' body-part processing branch, Xu et
al., paper 001): three horizontal bands of the ``layer4`` feature map (see
:data:`PART_BANDS`), each average-pooled, concatenated and embedded by
``part.fc`` + ``part.bn`` into ``feat_dim``; the retrieval feature is then the
fused ``theta = v * global + (1 - v) * part`` (Eq. 1), with ``v`` the buffer
``part.fusion_weight`` (default 0.5).  ``v == 1`` skips the part branch and
gives the plain global feature.

Group normalisation (``norm="group"``, for DP-SGD): every BatchNorm layer of
the trunk, neck, part branch and classifier head is replaced by a freshly
initialised GroupNorm (:func:`use_group_norm`), so that a sample's output no
longer depends on the other samples of its batch and per-sample gradients
exist (Opacus rejects BatchNorm).  The choice is recorded in
:meth:`ReIDModel.model_config`, so checkpoints rebuild the same layers.
"""

from __future__ import annotations

import logging
import math
from os import PathLike
from typing import Any

import torch
from torch import nn

from privreid.errors import ConfigError
from privreid.models.attentive_norm import ACTIVATIONS, DEFAULT_COMPONENTS, apply_attentive_norm
from privreid.models.resnet import NORM_TYPES, NormFactory, ResNet, replace_norm_layers
from privreid.models.weights import load_imagenet_weights, load_weights_file

NECKS = ("linear", "bnneck")
NORMS = ("batch", "group")
#: groups of a 2-d GroupNorm (Wu & He, "Group Normalization", ECCV 2018: G = 32;
#: also what Opacus' ``ModuleValidator.fix`` uses)
GROUPS_2D = 32
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


def use_group_norm(module: nn.Module) -> list[str]:
    """Replace every BatchNorm layer inside ``module`` by a fresh GroupNorm, in place; the replaced names.

    * 2-d layers (feature maps): ``GroupNorm(gcd(32, C), C)``, Wu & He's
      G = 32 (every ResNet width here is a multiple of 32).
    * 1-d layers (``(N, C)`` embeddings: the linear neck's and the part
      branch's ``bn``, the mapping head's BN): ``GroupNorm(1, C)``, i.e. a
      LayerNorm over the feature.  Choice: Opacus' ``min(32, C)`` groups would
      give a 32-d embedding one channel per group, which GroupNorm normalises
      by itself: the output would be the bias, whatever the input.
    * A frozen bias (BNNeck's) stays frozen at zero.

    GroupNorm normalises each sample with its own statistics, so it has no
    running statistics and no batch coupling.
    """
    frozen = {name for name, m in module.named_modules()
              if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.bias is not None and not m.bias.requires_grad}
    replaced = replace_norm_layers(module, lambda c: nn.GroupNorm(1, c),
                                   lambda name, m: isinstance(m, nn.BatchNorm1d))
    replaced += replace_norm_layers(module, lambda c: nn.GroupNorm(math.gcd(GROUPS_2D, c), c),
                                    lambda name, m: isinstance(m, nn.modules.batchnorm._BatchNorm))
    for name in frozen:
        module.get_submodule(name).bias.requires_grad_(False)
    return sorted(replaced)

#: FedARKS body-part bands as fractions of the feature-map height (top = 0):
#: head / shoulders, torso (shoulders to hips), legs.  The paper segments the
#: parts with PifPaf keypoints; no pose model is available offline, so privreid
#: uses these fixed bands of an upright pedestrian crop (hips at about 55 % of
#: the height).  Dataset-provided keypoints / part boxes are not yet supported.
PART_BANDS: tuple[tuple[float, float], ...] = ((0.0, 0.25), (0.25, 0.55), (0.55, 1.0))


def band_rows(height: int, bands=PART_BANDS) -> list[tuple[int, int]]:
    """Row ranges ``[start, end)`` of ``bands`` on a map of ``height`` rows.

    Boundaries are rounded half up; every band keeps at least one row, so on
    very short maps (2 rows for 32-pixel test images) neighbouring bands share
    a row.
    """
    rows = []
    for lo, hi in bands:
        start = min(int(math.floor(lo * height + 0.5)), height - 1)
        end = max(int(math.floor(hi * height + 0.5)), start + 1)
        rows.append((start, min(end, height)))
    return rows


class PartBranch(nn.Module):
    """FedARKS' body-part branch: band pooling -> ``fc: Linear(n_bands * C, dim)`` -> ``bn``.

    A single linear layer over the concatenated band features equals the sum of
    one embedding per part, i.e. the "combined body part feature" of Eq. 1.
    ``fusion_weight`` is ``v`` of Eq. 1 (weight of the global feature).
    """

    def __init__(self, in_dim: int, dim: int, fusion_weight: float = 0.5) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim * len(PART_BANDS), dim)
        self.bn = nn.BatchNorm1d(dim)
        nn.init.kaiming_normal_(self.fc.weight, mode="fan_out")
        nn.init.zeros_(self.fc.bias)
        self.register_buffer("fusion_weight", torch.tensor(float(fusion_weight)))

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        pooled = [fmap[:, :, a:b].mean(dim=(2, 3)) for a, b in band_rows(fmap.shape[2])]
        return self.bn(self.fc(torch.cat(pooled, dim=1)))


def fuse(global_feat: torch.Tensor, part_feat: torch.Tensor, v: float | torch.Tensor) -> torch.Tensor:
    """FedARKS Eq. 1: ``theta = v * global + (1 - v) * part``."""
    return v * global_feat + (1 - v) * part_feat


#: state-dict prefix of the identity classifier (:attr:`ReIDModel.classifier`), the head every method keeps
#: per client (its label space is the client's); the one place this name is spelled
CLASSIFIER_PREFIX = "classifier."


def is_classifier_key(key: str) -> bool:
    """Whether the state-dict key ``key`` of a :class:`ReIDModel` belongs to its identity classifier."""
    return key.startswith(CLASSIFIER_PREFIX)


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
        attentive_norm: replace the second norm of every residual block by
            attentive normalisation (SKA, paper 000, Eq. 2;
            :mod:`privreid.models.attentive_norm`).
        an_components: AN's mixture size M, one int or one per stage.
        an_act: AN's attention activation.
        dual_norm: add ``general_norms``, a second copy of every norm layer of
            the trunk and neck (``nn.ModuleDict`` keyed by the layer's name with
            ``.`` -> ``__``), unused by ``forward``: SKA's local generalised
            norm layers (Sec. 3.3), carried in the state dict so they can be
            uploaded.  See :mod:`privreid.federated.methods.ska`.
        part_branch: add FedARKS' body-part branch (:class:`PartBranch`,
            state keys ``part.*``); the retrieval / training feature becomes
            the fused theta of Eq. 1.
        dropout: dropout probability on the feature the classifier reads
            (:meth:`classify`); 0 = none.  No parameters, no state keys.

    Normalisation: BatchNorm; :meth:`use_group_norm` switches the model to
    GroupNorm (``norm_kind`` ``"group"``), which heads built later inherit.

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
        part_branch: bool = False,
        attentive_norm: bool = False,
        an_components: int | tuple[int, ...] | list[int] = DEFAULT_COMPONENTS,
        an_act: str = "hsigmoid",
        dual_norm: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout must lie in [0, 1), got {dropout}")
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        if head not in HEADS:
            raise ConfigError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
        self.head_kind = head
        self.norm_kind = "batch"
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
        self.part_branch = bool(part_branch)
        self.part: PartBranch | None = PartBranch(self.backbone.out_dim, self.feat_dim) if part_branch else None
        self.classifier: nn.Module | None = None
        self._num_classes = 0
        self.reset_classifier(num_classes)
        self.attentive_norm = False
        self.an_components: list[int] | None = None
        self.an_act = an_act
        self.dual_norm = False
        self.configure_norms(attentive_norm=attentive_norm, an_components=an_components, an_act=an_act,
                             dual_norm=dual_norm)

    def configure_norms(self, *, attentive_norm: bool = False,
                        an_components: int | tuple[int, ...] | list[int] = DEFAULT_COMPONENTS,
                        an_act: str = "hsigmoid", dual_norm: bool = False) -> None:
        """Switch on attentive normalisation and/or the dual (generalised) norm copies, in place.

        Done after construction (and, in :func:`build_model`, after loading
        weights, so ImageNet BN weights seed the AN layers).  Each switch can
        be applied once.
        """
        if attentive_norm and not self.attentive_norm:
            if an_act not in ACTIVATIONS:
                raise ConfigError(f"unknown AN activation {an_act!r}; choose one of {', '.join(ACTIVATIONS)}")
            comps = [int(an_components)] * 4 if isinstance(an_components, int) else [int(c) for c in an_components]
            if len(comps) != 4 or min(comps) < 1:
                raise ConfigError(f"an_components must be one positive int or four, got {an_components!r}")
            apply_attentive_norm(self.backbone, comps, an_act)
            self.attentive_norm, self.an_components, self.an_act = True, comps, an_act
        if dual_norm and not self.dual_norm:
            import copy

            self.general_norms = nn.ModuleDict({
                name.replace(".", "__"): copy.deepcopy(module)
                for name, module in self.named_modules()
                if name.startswith(("backbone.", "neck.")) and isinstance(module, NORM_TYPES)
            })
            self.dual_norm = True

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
        if self.norm_kind == "group":
            use_group_norm(self.classifier)

    def use_group_norm(self) -> list[str]:
        """Switch every BatchNorm of the model (and of heads built later) to GroupNorm; see :func:`use_group_norm`.

        Raises ConfigError with attentive normalisation, whose mixture sits on
        batch statistics.
        """
        if self.attentive_norm:
            raise ConfigError("attentive normalisation (SKA's AN) normalises with batch statistics and has no "
                              "GroupNorm form; switch it off (--opt an=false) to use group normalisation")
        self.norm_kind = "group"
        return use_group_norm(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Retrieval feature ``(B, feat_dim)``: the neck output after its BatchNorm.

        With a part branch: the fused theta of Eq. 1 (the neck output when
        ``part.fusion_weight == 1``).
        """
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
        """``(pre_neck_feat, feat, logits)``.

        ``pre_neck_feat`` is the pooled trunk feature ``(B, out_dim)`` (for the
        triplet loss), ``feat`` the neck output ``(B, feat_dim)``, ``logits``
        the classifier output ``(B, num_classes)`` (:meth:`classify`: after
        dropout, when configured).

        With a part branch (FedARKS Eq. 2) the metric feature is the fused
        theta: the method returns ``(theta, theta, classifier(theta))``, so the
        triplet loss and the classifier both see theta.
        """
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
        """Keyword arguments for :func:`build_model` that rebuild this architecture."""
        config = {
            "arch": self.arch,
            "num_classes": self.num_classes,
            "neck": self.neck_kind,
            "feat_dim": self.feat_dim,
            "last_stride": self.last_stride,
            "head": self.head_kind,
            # only when on, so configurations of plain models are unchanged
            **({"attentive_norm": True, "an_components": list(self.an_components), "an_act": self.an_act}
               if self.attentive_norm else {}),
            **({"dual_norm": True} if self.dual_norm else {}),
            **({"norm": "group"} if self.norm_kind == "group" else {}),
            **({"dropout": self.dropout.p} if self.dropout is not None else {}),
        }
        if self.part_branch:  # only when set: older configs / checkpoints stay unchanged
            config["part_branch"] = True
        return config


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
    part_branch: bool = False,
    attentive_norm: bool = False,
    an_components: int | tuple[int, ...] | list[int] = DEFAULT_COMPONENTS,
    an_act: str = "hsigmoid",
    dual_norm: bool = False,
    norm: str = "batch",
    dropout: float = 0.0,
) -> ReIDModel:
    """Build a :class:`ReIDModel`, optionally initialised from weights.

    Args:
        pretrained: ``"imagenet"`` loads torchvision's IMAGENET1K_V1 weights
            into the trunk (needs internet or torch hub's cache).
        weights: path of a local state dict (trunk-style or full-model style,
            see :func:`privreid.models.weights.load_weights_file`); the offline
            alternative to ``pretrained``.
        norm: ``"batch"`` or ``"group"`` (:meth:`ReIDModel.use_group_norm`,
            applied after the weights are loaded: BatchNorm-trained weights
            keep their convolutions, the GroupNorm layers start fresh).

    Other arguments as in :class:`ReIDModel`; ``attentive_norm`` and
    ``dual_norm`` are applied after the weights are loaded (AN layers start
    from the loaded BN layers).  Raises ConfigError for unknown
    arch / neck / pretrained values, when both ``pretrained`` and ``weights``
    are given, and for weights that cannot be obtained or do not fit.
    """
    if pretrained is not None and pretrained not in PRETRAINED:
        raise ConfigError(f"unknown pretrained weights {pretrained!r}; choose one of {', '.join(PRETRAINED)}")
    if pretrained is not None and weights is not None:
        raise ConfigError("give either pretrained or weights, not both")
    model = ReIDModel(arch, num_classes, neck, feat_dim, last_stride, norm_layer, head, part_branch,
                      dropout=dropout)
    if pretrained is not None:
        loaded = load_imagenet_weights(model.backbone)
        _log.info("loaded %d ImageNet tensors into the %s trunk", len(loaded), arch)
    elif weights is not None:
        loaded = load_weights_file(model, weights)
        _log.info("loaded %d tensors from %s", len(loaded), weights)
    if norm not in NORMS:
        raise ConfigError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
    if norm == "group":
        if attentive_norm:
            raise ConfigError("attentive normalisation (SKA's AN) normalises with batch statistics and has no "
                              "GroupNorm form; switch it off (--opt an=false) to use group normalisation")
        model.use_group_norm()
    model.configure_norms(attentive_norm=attentive_norm, an_components=an_components, an_act=an_act,
                          dual_norm=dual_norm)
    return model
