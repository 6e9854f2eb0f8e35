"""Model transforms: the method-specific parts of a ReID model.

The base :class:`~privreid.models.reid_net.ReIDModel` is a trunk, a neck and a linear identity classifier.
A method (``Method.model_transforms``) or a defense's ``wrap`` adds named *model transforms*:

==================  ==========================================================
``mlp_head``        FedReID's mapping network as the classifier (paper 002, Eq. 7)
``part_branch``     FedARKS' body-part branch, fused feature (paper 001, Eq. 1)
``group_norm``      every BatchNorm -> GroupNorm, for DP-SGD's per-sample gradients
``attentive_norm``  SKA's attentive normalisation on each block's ``bn2`` (paper 000, Eq. 2)
``dual_norm``       SKA's local generalised norm copies ``general_norms`` (paper 000, Sec. 3.3)
``neck_bias``       the BNNeck's bias trains (L2RW+'s DPPT, as its reference code)
==================  ==========================================================

:func:`privreid.models.build_model` applies them in one fixed order: the structural ones
(:attr:`ModelTransform.after_weights` false) on the fresh base model before its classifier and any weights; the
normalisation ones after the weights (ImageNet BatchNorm weights seed the attentive-norm mixture), in the order
of :data:`TRANSFORMS` (the dual copies copy the final norm layers). Parameters are created in that order, so a
seed gives the same initial weights. Each transform is a frozen dataclass; ``to_config()`` is its entry in
``model_config()["transforms"]``, :func:`make_transform` the inverse, :func:`register_transform` adds one.
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

    ``negative_slope > 0``: ``LeakyReLU`` as the authors' code (SunTongtongtong/FedReid ``lib/model.py``,
    ``MLP``: 0.1; Eq. 7 writes ReLU). Initialisation as that code's (the papers are silent): first FC
    Kaiming-normal (fan-out), BN weight N(1, 0.02^2), last FC N(0, 0.001^2), biases zero.
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
    """``mlp_head``: the identity classifier is FedReID's mapping network (:func:`mlp_head`, paper 002 Eq. 7);
    ``negative_slope`` 0 is Eq. 7's ReLU, 0.1 the reference code's LeakyReLU."""

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
    """``part_branch``: FedARKS' body-part branch (paper 001, Eq. 1) as ``model.part``; the feature becomes the
    fused ``theta = v * global + (1 - v) * part`` (:class:`~privreid.models.part_branch.PartBranch`)."""

    name: ClassVar[str] = "part_branch"

    def apply(self, model: ReIDModel) -> ReIDModel:
        model.part = PartBranch(model.backbone.out_dim, model.feat_dim)
        return model


def use_group_norm(module: nn.Module) -> list[str]:
    """Replace every BatchNorm inside ``module`` by a fresh GroupNorm, in place; the replaced names.

    2-d layers: ``GroupNorm(gcd(32, C), C)`` (Wu & He's G = 32). 1-d layers (the necks', part branch's and
    mapping head's ``(N, C)`` BN): ``GroupNorm(1, C)``, a LayerNorm; not Opacus' ``min(32, C)`` groups, which
    would give a 32-d embedding one channel per group and output the bias whatever the input. A frozen bias
    (BNNeck's) stays frozen at zero.
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

    For DP-SGD (Abadi et al. 2016; Opacus rejects BatchNorm): no batch coupling, so per-sample gradients exist.
    Applied after the weights (:func:`use_group_norm`); refused with ``attentive_norm`` (batch statistics).
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

    ``components``: the mixture size M, one int or one per stage (default
    :data:`~privreid.models.attentive_norm.DEFAULT_COMPONENTS`); ``act``: one of
    :data:`~privreid.models.attentive_norm.ACTIVATIONS`. Each AN layer starts from the BN it replaces.
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
    """``dual_norm``: SKA's local generalised norm layers (paper 000, Sec. 3.3) as ``model.general_norms``: a
    copy of every trunk and neck norm layer (key: the name with ``.`` -> ``__``), unused by ``forward``, carried
    in the state dict to be uploaded (:mod:`privreid.federated.methods.ska`). Applied last."""

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
    """``neck_bias``: the BNNeck's bias trains instead of staying frozen at zero, as DPPT's reference code
    (Joey623/L2RW ``CI/model.py:39-40``: a plain ``BatchNorm1d``) where Luo et al. freeze it. ``bnneck`` only."""

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
