"""ResNet-18/34/50 trunks for person re-identification.

Why not ``torchvision.models.resnet``?  Its residual blocks add the shortcut in
place (``out += identity``) and use ``ReLU(inplace=True)``.  When full backward
hooks are registered on a block (``register_full_backward_hook``, which Opacus'
per-sample-gradient hooks rely on), the block's output passes through a
``BackwardHookFunction`` that returns a view; modifying that view in place makes
autograd raise "Output 0 of BackwardHookFunction is a view and is being modified
inplace" on torch 2.14.  The blocks here therefore compute the residual sum out
of place (``out = out + identity``) and every ReLU has ``inplace=False``.

The parameter and buffer names are exactly torchvision's (``conv1``, ``bn1``,
``layer1.0.conv1``, ..., ``layer1.0.downsample.0``/``.1``) without ``fc.*``, so
torchvision's ImageNet state dicts load with strict key matching.

Two ReID-specific choices:

* ``last_stride=1`` removes the down-sampling of ``layer4`` (Luo et al., "Bag of
  Tricks and a Strong Baseline for Deep Person Re-identification", CVPRW 2019),
  doubling the height and width of the final feature map at no parameter cost.
* ``norm_layer`` is a factory ``Callable[[int], nn.Module]`` used for every
  normalisation layer, and :func:`replace_norm_layers` swaps norms of an already
  built module (e.g. GroupNorm everywhere for DP-SGD, or attentive
  normalisation on each block's ``bn2`` only).

The trunk's ``forward`` returns the globally average-pooled feature ``(B, C)``;
:meth:`ResNet.feature_map` returns the un-pooled ``layer4`` map.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from privreid.errors import ConfigError

NormFactory = Callable[[int], nn.Module]
"""Builds a normalisation layer for a given number of channels."""

# Norm layers that have a channel count and can therefore be rebuilt by a
# NormFactory: every BatchNorm / InstanceNorm variant (_NormBase) and GroupNorm.
NORM_TYPES: tuple[type[nn.Module], ...] = (nn.modules.batchnorm._NormBase, nn.GroupNorm)


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an out-of-place residual sum (ResNet-18/34)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None,
                 norm_layer: NormFactory) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=False)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + identity  # out of place: see the module docstring
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (strided, as in torchvision's "v1.5") -> 1x1, out-of-place residual (ResNet-50)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None,
                 norm_layer: NormFactory) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = norm_layer(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = norm_layer(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=False)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = out + identity  # out of place: see the module docstring
        return self.relu(out)


# arch -> (block type, blocks per stage)
ARCHS: dict[str, tuple[type[BasicBlock] | type[Bottleneck], tuple[int, int, int, int]]] = {
    "resnet18": (BasicBlock, (2, 2, 2, 2)),
    "resnet34": (BasicBlock, (3, 4, 6, 3)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
}


class ResNet(nn.Module):
    """A ResNet trunk without the classification layer.

    Args:
        arch: one of :data:`ARCHS` (``resnet18``, ``resnet34``, ``resnet50``).
        last_stride: stride of ``layer4``; 2 is the ImageNet ResNet, 1 is the
            ReID variant of Luo et al. (2019).
        norm_layer: factory for every normalisation layer (default
            ``nn.BatchNorm2d``).

    Attributes:
        arch, last_stride: as given.
        out_dim: channels of the pooled feature (512 for 18/34, 2048 for 50).
    """

    def __init__(self, arch: str = "resnet18", last_stride: int = 2, norm_layer: NormFactory | None = None) -> None:
        super().__init__()
        if arch not in ARCHS:
            raise ConfigError(f"unknown backbone arch {arch!r}; choose one of {', '.join(ARCHS)}")
        if last_stride not in (1, 2):
            raise ConfigError(f"last_stride must be 1 or 2, got {last_stride!r}")
        block, layers = ARCHS[arch]
        self.arch = arch
        self.last_stride = last_stride
        self._norm_layer = norm_layer if norm_layer is not None else nn.BatchNorm2d
        self._inplanes = 64

        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(64)
        self.relu = nn.ReLU(inplace=False)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0], stride=1)
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=last_stride)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.out_dim = 512 * block.expansion

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.modules.batchnorm._BatchNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(
        self, block: type[BasicBlock] | type[Bottleneck], planes: int, blocks: int, stride: int
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self._inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self._inplanes, planes * block.expansion, stride),
                self._norm_layer(planes * block.expansion),
            )
        layers = [block(self._inplanes, planes, stride, downsample, self._norm_layer)]
        self._inplanes = planes * block.expansion
        layers += [block(self._inplanes, planes, 1, None, self._norm_layer) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """The ``layer4`` output ``(B, out_dim, H/16 or H/32, W/16 or W/32)``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        return self.layer4(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Globally average-pooled feature ``(B, out_dim)``."""
        return torch.flatten(self.avgpool(self.feature_map(x)), 1)


def resnet18(last_stride: int = 2, norm_layer: NormFactory | None = None) -> ResNet:
    """ResNet-18 trunk (BasicBlock, 512-d pooled feature)."""
    return ResNet("resnet18", last_stride, norm_layer)


def resnet34(last_stride: int = 2, norm_layer: NormFactory | None = None) -> ResNet:
    """ResNet-34 trunk (BasicBlock, 512-d pooled feature)."""
    return ResNet("resnet34", last_stride, norm_layer)


def resnet50(last_stride: int = 2, norm_layer: NormFactory | None = None) -> ResNet:
    """ResNet-50 trunk (Bottleneck, 2048-d pooled feature)."""
    return ResNet("resnet50", last_stride, norm_layer)


def _num_channels(norm: nn.Module) -> int:
    if isinstance(norm, nn.GroupNorm):
        return norm.num_channels
    return norm.num_features


def replace_norm_layers(
    module: nn.Module,
    factory: NormFactory,
    predicate: Callable[[str, nn.Module], bool] | None = None,
) -> list[str]:
    """Replace normalisation layers inside ``module`` in place.

    Every descendant that is a BatchNorm / InstanceNorm / GroupNorm layer (see
    :data:`NORM_TYPES`) and for which ``predicate(qualified_name, layer)`` is
    true (all of them when ``predicate`` is None) is replaced by
    ``factory(num_channels)``.  The new layer is freshly initialised by the
    factory, moved to the old layer's device and floating dtype, and given its
    train/eval mode.  ``module`` itself is never replaced.

    Examples::

        replace_norm_layers(trunk, lambda c: nn.GroupNorm(32, c))      # DP-SGD
        replace_norm_layers(trunk, AttentiveNorm, lambda n, m: n.endswith(".bn2"))

    Returns:
        The qualified names of the replaced layers, in module order.
    """
    targets = [
        name
        for name, child in module.named_modules()
        if name and isinstance(child, NORM_TYPES) and (predicate is None or predicate(name, child))
    ]
    for name in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = module.get_submodule(parent_name)
        old = getattr(parent, attr)
        new = factory(_num_channels(old))
        tensors = [*old.parameters(recurse=False), *old.buffers(recurse=False)]
        floating = [t for t in tensors if t.is_floating_point()]
        if floating:
            new.to(device=floating[0].device, dtype=floating[0].dtype)
        new.train(old.training)
        setattr(parent, attr, new)
    return targets
