"""A ResNet trunk from foreign weights named like torchvision's (torchreid's ``ResNet``, fast-reid's
``backbone``): the architecture read from the keys (:data:`privreid.models.ARCHS`), checked against ``--arch``,
the weights loaded strictly into privreid's :class:`~privreid.models.ResNet`."""

from __future__ import annotations

import re

import torch
from torch import nn

from privreid.errors import CheckpointError
from privreid.models.resnet import ARCHS, Bottleneck, ResNet

_TRUNK_KEY = re.compile(r"^(conv1|bn1|layer[1-4])\.")


def trunk_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of ``state`` that belong to a ResNet trunk."""
    return {k: v for k, v in state.items() if _TRUNK_KEY.match(k)}


def infer_arch(trunk: dict[str, torch.Tensor], path: str) -> str:
    """The :data:`ARCHS` name whose block type and stage depths match ``trunk``'s keys."""
    bottleneck = any(k.endswith(".conv3.weight") for k in trunk)
    depths = tuple(len({k.split(".")[1] for k in trunk if k.startswith(f"layer{i}.")}) for i in range(1, 5))
    for name, (block, layers) in ARCHS.items():
        if (block is Bottleneck) == bottleneck and tuple(layers) == depths:
            return name
    raise CheckpointError(f"{path}: a ResNet trunk with {'bottleneck' if bottleneck else 'basic'} blocks "
                          f"{list(depths)} is none of {', '.join(ARCHS)}")


def build_trunk(state: dict[str, torch.Tensor], path: str, *, arch: str | None, last_stride: int) -> ResNet:
    """A privreid ResNet holding ``state``'s trunk weights (strict); CheckpointError on a mismatch."""
    trunk = trunk_keys(state)
    found = infer_arch(trunk, path)
    if arch is not None and arch != found:
        raise CheckpointError(f"{path} holds a {found} trunk, not the {arch} given with --arch")
    net = ResNet(found, last_stride=last_stride)
    try:
        net.load_state_dict(trunk, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise CheckpointError(f"{path}: the trunk weights do not fit privreid's {found} "
                              f"({first[1].strip() if len(first) > 1 else first[0]})") from None
    return net


class TrunkHead(nn.Module):
    """The retrieval feature ``head(pooled trunk feature)``."""

    def __init__(self, trunk: ResNet, head: nn.Module) -> None:
        super().__init__()
        self.trunk, self.head = trunk, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


def linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    """An ``nn.Linear`` holding ``weight`` (out, in) and ``bias``."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    layer.load_state_dict({"weight": weight, **({"bias": bias} if bias is not None else {})})
    return layer


def batch_norm(state: dict[str, torch.Tensor], prefix: str) -> nn.BatchNorm1d:
    """A ``BatchNorm1d`` from ``state``'s ``prefix``-ed weight / bias / running stats (a BatchNorm1d or 2d's)."""
    entries = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
    norm = nn.BatchNorm1d(entries["running_mean"].shape[0])
    norm.load_state_dict({k: v.reshape(-1) if v.dim() else v for k, v in entries.items()}, strict=False)
    return norm
