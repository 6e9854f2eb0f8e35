"""ResNet-18/34/50 trunks for person re-identification.

Not ``torchvision.models.resnet``: its blocks add the shortcut in place and use ``ReLU(inplace=True)``, and
under full backward hooks (Opacus' per-sample gradients) the block's output is a view whose in-place change
makes torch 2.14 raise "Output 0 of BackwardHookFunction is a view and is being modified inplace". The blocks
here add out of place and no ReLU is in place. Parameter names are torchvision's without ``fc.*``, so ImageNet
state dicts load strictly.

``last_stride=1`` removes ``layer4``'s down-sampling (Luo et al., "Bag of Tricks ...", CVPRW 2019);
``norm_layer`` makes every normalisation layer and :func:`replace_norm_layers` swaps them in a built module.
``forward`` returns the average-pooled ``(B, C)`` feature, :meth:`ResNet.feature_map` the ``layer4`` map.
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
    """A ResNet trunk without the classification layer: ``arch`` in :data:`ARCHS`; ``last_stride`` 2 (ImageNet)
    or 1 (Luo et al.); ``norm_layer`` (default ``nn.BatchNorm2d``); ``out_dim`` 512 (18/34) or 2048 (50)."""

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

        for m in self.modules():  # norm layers keep their own initialisation (BatchNorm: weight 1, bias 0)
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

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


def _num_channels(norm: nn.Module) -> int:
    if isinstance(norm, nn.GroupNorm):
        return norm.num_channels
    return norm.num_features


def replace_norm_layers(
    module: nn.Module,
    factory: NormFactory,
    predicate: Callable[[str, nn.Module], bool] | None = None,
) -> list[str]:
    """Replace, in place, every norm layer (:data:`NORM_TYPES`) inside ``module`` for which
    ``predicate(qualified_name, layer)`` holds (all when ``None``) by ``factory(num_channels)``, fresh, on the
    old layer's device, dtype and mode; the replaced names, in module order. E.g.
    ``replace_norm_layers(trunk, AttentiveNorm, lambda n, m: n.endswith(".bn2"))``.
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
