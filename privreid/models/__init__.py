"""Models: ResNet trunks (out-of-place residuals, last stride 1), necks, heads, weight loading."""

from privreid.models.reid_net import NECKS, PRETRAINED, BNNeck, LinearNeck, ReIDModel, build_model
from privreid.models.resnet import (
    ARCHS,
    NORM_TYPES,
    BasicBlock,
    Bottleneck,
    NormFactory,
    ResNet,
    replace_norm_layers,
    resnet18,
    resnet34,
    resnet50,
)
from privreid.models.weights import IMAGENET_WEIGHTS, load_imagenet_weights, load_weights_file

__all__ = [
    "ARCHS",
    "IMAGENET_WEIGHTS",
    "NECKS",
    "NORM_TYPES",
    "PRETRAINED",
    "BNNeck",
    "BasicBlock",
    "Bottleneck",
    "LinearNeck",
    "NormFactory",
    "ReIDModel",
    "ResNet",
    "build_model",
    "load_imagenet_weights",
    "load_weights_file",
    "replace_norm_layers",
    "resnet18",
    "resnet34",
    "resnet50",
]
