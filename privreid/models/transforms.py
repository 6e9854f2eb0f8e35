"""Model transforms: the method-specific parts of a ReID model.

The base :class:`~privreid.models.reid_net.ReIDModel` is a trunk, a neck and a
linear identity classifier.  What a method (or a defense) adds to it is a
named *model transform*, declared by the method (``Method.model_transforms``)
or added by the defense's ``wrap`` (DP-SGD's ``group_norm``):

==================  ==========================================================
``mlp_head``        FedReID's mapping network as the classifier (paper 002, Eq. 7)
``part_branch``     FedARKS' body-part branch, fused feature (paper 001, Eq. 1)
``group_norm``      every BatchNorm -> GroupNorm, for DP-SGD's per-sample gradients
``attentive_norm``  SKA's attentive normalisation on each block's ``bn2`` (paper 000, Eq. 2)
``dual_norm``       SKA's local generalised norm copies ``general_norms`` (paper 000, Sec. 3.3)
``neck_bias``       the BNNeck's bias trains (L2RW+'s DPPT, as its reference code)
==================  ==========================================================

:func:`privreid.models.build_model` applies them in one fixed order, whatever
order they are given in: the structural ones (:attr:`ModelTransform.
after_weights` false) on the fresh base model, before its classifier and
before any weights are loaded; the normalisation ones after the weights are
loaded (ImageNet BatchNorm weights seed the attentive-norm mixture), in the
order of :data:`TRANSFORMS` (``group_norm``, ``attentive_norm``,
``dual_norm``: the dual copies copy the final norm layers).  This is also
the order in which the parameters are created, so a seed gives the same
initial weights.

Each transform is a frozen dataclass (its fields are its parameters);
``to_config()`` is its entry in ``ReIDModel.model_config()["transforms"]``
and :func:`make_transform` turns such an entry back into the transform.  A
new transform is one :class:`ModelTransform` subclass and
:func:`register_transform` (docs/extending.md).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from torch import nn

from privreid.errors import ConfigError
from privreid.registry import Registry
from privreid.models.attentive_norm import ACTIVATIONS, DEFAULT_COMPONENTS, apply_attentive_norm
from privreid.models.part_branch import PartBranch
from privreid.models.reid_net import BNNeck
from privreid.models.resnet import NORM_TYPES, replace_norm_layers

if TYPE_CHECKING:
    from privreid.models.reid_net import ReIDModel

#: groups of a 2-d GroupNorm (Wu & He, "Group Normalization", ECCV 2018: G = 32;
#: also what Opacus' ``ModuleValidator.fix`` uses)
GROUPS_2D = 32

#: the message for SKA's attentive normalisation together with GroupNorm
AN_GROUP_NORM = ("attentive normalisation (SKA's AN) normalises with batch statistics and has no "
                 "GroupNorm form; switch it off (--opt an=false) to use group normalisation")


@dataclass(frozen=True)
class ModelTransform:
    """One named change to a :class:`ReIDModel`; subclasses set :attr:`name` and override :meth:`apply`."""

    #: registry key and ``model_config`` name
    name: ClassVar[str] = ""
    #: applied after the initial weights are loaded (normalisation layers); else before, on the fresh base model
    after_weights: ClassVar[bool] = False

    def apply(self, model: ReIDModel) -> ReIDModel:
        """Change ``model`` in place and return it."""
        raise NotImplementedError

    def adapt_head(self, head: nn.Module) -> nn.Module:
        """A classifier built after this transform was applied (``ReIDModel.new_head``); default: unchanged."""
        return head

    def check(self, names: set[str]) -> None:
        """Raise :class:`ConfigError` when this transform cannot go with the transforms ``names``."""

    def to_config(self) -> dict[str, Any]:
        """``{"name": name, **parameters}``: plain data for ``model_config`` (:func:`make_transform` inverts it)."""
        params = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        return {"name": self.name, **params}


def mlp_head(feat_dim: int, num_classes: int, hidden: int = 512, negative_slope: float = 0.0) -> nn.Module:
    """FedReID's mapping network (Wu & Gong, paper 002, Eq. 7): ``FC -> BN -> ReLU -> Dropout(0.5) -> FC``.

    ``negative_slope > 0`` makes the activation ``LeakyReLU(negative_slope)``,
    as the authors' code builds it (SunTongtongtong/FedReid ``lib/model.py``,
    ``MLP``: ``LeakyReLU(0.1)``; Eq. 7 writes ReLU).  Initialisation as that
    code's (the papers are silent): the first FC Kaiming-normal (fan-out),
    the BN weight N(1, 0.02^2), the last FC N(0, 0.001^2), biases zero.
    """
    act = nn.LeakyReLU(negative_slope) if negative_slope > 0 else nn.ReLU(inplace=False)
    head = nn.Sequential(nn.Linear(feat_dim, hidden), nn.BatchNorm1d(hidden), act, nn.Dropout(0.5),
                         nn.Linear(hidden, num_classes))
    nn.init.kaiming_normal_(head[0].weight, mode="fan_out")
    nn.init.zeros_(head[0].bias)
    nn.init.normal_(head[1].weight, 1.0, 0.02)
    nn.init.zeros_(head[1].bias)
    nn.init.normal_(head[4].weight, std=0.001)
    nn.init.zeros_(head[4].bias)
    return head


@dataclass(frozen=True)
class MLPHeadTransform(ModelTransform):
    """``mlp_head``: the identity classifier is FedReID's 2-FC mapping network (:func:`mlp_head`, paper 002 Eq. 7).

    Args:
        negative_slope: of the activation; 0 (default) is Eq. 7's ReLU, 0.1
            the reference code's LeakyReLU (:func:`mlp_head`).
    """

    name: ClassVar[str] = "mlp_head"

    negative_slope: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.negative_slope) < 1.0:
            raise ConfigError(f"mlp_head negative_slope must lie in [0, 1), got {self.negative_slope!r}")
        object.__setattr__(self, "negative_slope", float(self.negative_slope))

    def to_config(self) -> dict[str, Any]:
        """``{"name": "mlp_head"}`` for ReLU, the entry of checkpoints written before ``negative_slope`` existed."""
        return super().to_config() if self.negative_slope else {"name": self.name}

    def apply(self, model: ReIDModel) -> ReIDModel:
        model.head_factory = functools.partial(mlp_head, negative_slope=self.negative_slope)
        if model.classifier is not None:
            model.reset_classifier(model.num_classes)
        return model


@dataclass(frozen=True)
class PartBranchTransform(ModelTransform):
    """``part_branch``: FedARKS' body-part branch (paper 001, Eq. 1) as ``model.part`` (state keys ``part.*``).

    The retrieval and training feature becomes the fused ``theta = v * global
    + (1 - v) * part`` (:class:`~privreid.models.part_branch.PartBranch`).
    """

    name: ClassVar[str] = "part_branch"

    def apply(self, model: ReIDModel) -> ReIDModel:
        model.part = PartBranch(model.backbone.out_dim, model.feat_dim)
        return model


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


@dataclass(frozen=True)
class GroupNormTransform(ModelTransform):
    """``group_norm``: every BatchNorm of the model, and of classifiers built later, becomes GroupNorm.

    For DP-SGD (Abadi et al. 2016; Opacus rejects BatchNorm): a sample's
    output no longer depends on the other samples of its batch, so
    per-sample gradients exist.  Fresh layers (:func:`use_group_norm`),
    applied after the weights are loaded: BatchNorm-trained weights keep their
    convolutions.  Refused with ``attentive_norm``, whose mixture sits on
    batch statistics.
    """

    name: ClassVar[str] = "group_norm"
    after_weights: ClassVar[bool] = True

    def check(self, names: set[str]) -> None:
        if "attentive_norm" in names:
            raise ConfigError(AN_GROUP_NORM)

    def apply(self, model: ReIDModel) -> ReIDModel:
        self.check({t.name for t in model.transforms})
        use_group_norm(model)
        return model

    def adapt_head(self, head: nn.Module) -> nn.Module:
        use_group_norm(head)
        return head


@dataclass(frozen=True)
class AttentiveNormTransform(ModelTransform):
    """``attentive_norm``: SKA's attentive normalisation (paper 000, Sec. 3.2, Eq. 2) on each block's ``bn2``.

    Args:
        components: the mixture size M, one int or one per stage
            (``layer1..layer4``; default :data:`~privreid.models.attentive_norm.DEFAULT_COMPONENTS`).
        act: the attention activation, one of :data:`~privreid.models.attentive_norm.ACTIVATIONS`.

    Applied after the weights are loaded: each AN layer starts from the BN it
    replaces (:func:`~privreid.models.attentive_norm.apply_attentive_norm`).
    """

    name: ClassVar[str] = "attentive_norm"
    after_weights: ClassVar[bool] = True

    components: tuple[int, ...] = DEFAULT_COMPONENTS
    act: str = "hsigmoid"

    def __post_init__(self) -> None:
        if self.act not in ACTIVATIONS:
            raise ConfigError(f"unknown AN activation {self.act!r}; choose one of {', '.join(ACTIVATIONS)}")
        c = self.components
        comps = [int(c)] * 4 if isinstance(c, int) else [int(x) for x in c]
        if len(comps) != 4 or min(comps) < 1:
            raise ConfigError(f"an_components must be one positive int or four, got {c!r}")
        object.__setattr__(self, "components", tuple(comps))

    def check(self, names: set[str]) -> None:
        if "group_norm" in names:
            raise ConfigError(AN_GROUP_NORM)

    def apply(self, model: ReIDModel) -> ReIDModel:
        self.check({t.name for t in model.transforms})
        apply_attentive_norm(model.backbone, list(self.components), self.act)
        return model


@dataclass(frozen=True)
class DualNormTransform(ModelTransform):
    """``dual_norm``: SKA's local generalised norm layers (paper 000, Sec. 3.3) as ``model.general_norms``.

    A copy of every norm layer of the trunk and neck, in an ``nn.ModuleDict``
    keyed by the layer's name with ``.`` -> ``__``, unused by ``forward`` and
    carried in the state dict so that it can be uploaded
    (:mod:`privreid.federated.methods.ska`).  Applied last, so it copies the
    final norm layers (attentive ones included).
    """

    name: ClassVar[str] = "dual_norm"
    after_weights: ClassVar[bool] = True

    def apply(self, model: ReIDModel) -> ReIDModel:
        model.general_norms = nn.ModuleDict({
            name.replace(".", "__"): copy.deepcopy(module)
            for name, module in model.named_modules()
            if name.startswith(("backbone.", "neck.")) and isinstance(module, NORM_TYPES)
        })
        return model


@dataclass(frozen=True)
class NeckBiasTransform(ModelTransform):
    """``neck_bias``: the BNNeck's bias trains instead of staying frozen at zero.

    DPPT's reference code (Joey623/L2RW ``CI/model.py:39-40``) uses a plain
    ``BatchNorm1d`` bottleneck whose bias is a trainable parameter (zero at
    initialisation), where Luo et al.'s BNNeck freezes it.  Only for the
    ``bnneck`` neck (the linear neck's bias trains already).
    """

    name: ClassVar[str] = "neck_bias"

    def apply(self, model: ReIDModel) -> ReIDModel:
        if not isinstance(model.neck, BNNeck):
            raise ConfigError(f"model transform neck_bias needs the bnneck neck, got {model.neck_kind!r}")
        model.neck.bn.bias.requires_grad_(True)
        return model


#: name -> transform class; within each phase (before / after the weights) transforms apply in this order
TRANSFORMS: Registry[type[ModelTransform]] = Registry(
    "model transform", builtins=lambda: (MLPHeadTransform, PartBranchTransform, NeckBiasTransform,
                                         GroupNormTransform, AttentiveNormTransform, DualNormTransform))


def register_transform(cls: type[ModelTransform]) -> type[ModelTransform]:
    """Add a :class:`ModelTransform` subclass to :data:`TRANSFORMS` (after the ones registered so far)."""
    return TRANSFORMS.register(cls)


def unregister_transform(name: str) -> None:
    """Remove model transform ``name`` (a test's or a notebook's own); unknown names are refused."""
    TRANSFORMS.unregister(name)


def make_transform(spec: ModelTransform | str | Mapping[str, Any]) -> ModelTransform:
    """A transform from itself, its name, or its ``to_config()`` dict; ConfigError for unknown names or parameters."""
    if isinstance(spec, ModelTransform):
        return spec
    params = {"name": spec} if isinstance(spec, str) else dict(spec)
    cls = TRANSFORMS.get(params.pop("name", None))
    name = cls.name
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ConfigError(f"model transform {name!r} has no parameter {', '.join(unknown)}")
    return cls(**params)


def resolve_transforms(specs: Iterable[ModelTransform | str | Mapping[str, Any]]) -> list[ModelTransform]:
    """``specs`` as transforms in application order (:data:`TRANSFORMS`' order); ConfigError for repeats and clashes."""
    transforms = [make_transform(s) for s in specs]
    names = [t.name for t in transforms]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"model transform {', '.join(repeated)} given more than once")
    for t in transforms:
        t.check(set(names) - {t.name})
    order = list(TRANSFORMS)
    return sorted(transforms, key=lambda t: order.index(t.name))
