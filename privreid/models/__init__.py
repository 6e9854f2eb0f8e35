"""Models: ResNet trunks (out-of-place residuals, last stride 1), necks, heads, model transforms, weight loading."""

from privreid.models.build import PRETRAINED, build_from_config, build_model
from privreid.models.reid_net import NECKS, BNNeck, LinearNeck, ReIDModel
from privreid.models.resnet import ARCHS, NORM_TYPES, BasicBlock, Bottleneck, NormFactory, ResNet, replace_norm_layers
from privreid.models.transforms import (TRANSFORMS, ModelTransform, make_transform, register_transform,
                                       unregister_transform)
from privreid.models.weights import IMAGENET_WEIGHTS, load_imagenet_weights, load_weights_file

__all__ = [
    "ARCHS",
    "IMAGENET_WEIGHTS",
    "NECKS",
    "NORM_TYPES",
    "PRETRAINED",
    "TRANSFORMS",
    "BNNeck",
    "BasicBlock",
    "Bottleneck",
    "LinearNeck",
    "ModelTransform",
    "NormFactory",
    "ReIDModel",
    "ResNet",
    "build_from_config",
    "build_model",
    "load_imagenet_weights",
    "load_weights_file",
    "make_transform",
    "register_transform",
    "unregister_transform",
    "replace_norm_layers",
]
