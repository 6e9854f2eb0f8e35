"""Building a ReID model: the base model, its model transforms and its initial weights, in that order.
:func:`build_from_config` rebuilds one from a stored ``model_config``."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any

from privreid.errors import ConfigError
from privreid.models.reid_net import ReIDModel
from privreid.models.resnet import NormFactory
from privreid.models.transforms import ModelTransform, resolve_transforms
from privreid.models.weights import load_imagenet_weights, load_weights_file

PRETRAINED = ("imagenet",)

#: the keys of a ``model_config``
CONFIG_KEYS = ("arch", "num_classes", "neck", "feat_dim", "last_stride", "dropout", "transforms")

_log = logging.getLogger(__name__)


def build_model(
    arch: str = "resnet18",
    num_classes: int = 0,
    neck: str = "linear",
    feat_dim: int = 512,
    last_stride: int = 1,
    *,
    dropout: float = 0.0,
    transforms: Iterable[ModelTransform | str | Mapping[str, Any]] = (),
    pretrained: str | None = None,
    weights: str | PathLike[str] | None = None,
    norm_layer: NormFactory | None = None,
) -> ReIDModel:
    """The base :class:`ReIDModel` with ``transforms``, optionally initialised from weights.

    In this order (it fixes the RNG draws): the base model without classifier; the structural transforms
    (``mlp_head``, ``part_branch``); the classifier (``num_classes``; none when 0); the weights
    (``pretrained="imagenet"``: torchvision's IMAGENET1K_V1 into the trunk; ``weights``: a local state dict,
    :func:`privreid.models.weights.load_weights_file`); the normalisation transforms (AN starts from the loaded
    BN, GroupNorm fresh). ``transforms``: objects, names or ``to_config()`` dicts. ConfigError, before building,
    for unknown arch / neck / pretrained / transforms, both ``pretrained`` and ``weights``, clashing transforms;
    and for weights that cannot be obtained or do not fit.
    """
    if pretrained is not None and pretrained not in PRETRAINED:
        raise ConfigError(f"unknown pretrained weights {pretrained!r}; choose one of {', '.join(PRETRAINED)}")
    if pretrained is not None and weights is not None:
        raise ConfigError("give either pretrained or weights, not both")
    resolved = resolve_transforms(transforms)
    model = ReIDModel(arch, 0, neck, feat_dim, last_stride, norm_layer, dropout=dropout)
    _apply(model, [t for t in resolved if not t.after_weights])
    model.reset_classifier(num_classes)
    if pretrained is not None:
        loaded = load_imagenet_weights(model.backbone)
        _log.info("loaded %d ImageNet tensors into the %s trunk", len(loaded), arch)
    elif weights is not None:
        loaded = load_weights_file(model, weights)
        _log.info("loaded %d tensors from %s", len(loaded), weights)
    _apply(model, [t for t in resolved if t.after_weights])
    return model


def _apply(model: ReIDModel, transforms: list[ModelTransform]) -> None:
    for transform in transforms:
        transform.apply(model)
        model.transforms.append(transform)


def build_from_config(model_config: Mapping[str, Any], *, pretrained: str | None = None,
                      weights: str | PathLike[str] | None = None) -> ReIDModel:
    """The model ``model_config`` describes (:meth:`ReIDModel.model_config`), through :func:`build_model`;
    ConfigError for any other key."""
    rest = dict(model_config)
    unknown = sorted(set(rest) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"unknown model_config key {', '.join(unknown)}; expected {', '.join(CONFIG_KEYS)}")
    return build_model(**rest, pretrained=pretrained, weights=weights)
