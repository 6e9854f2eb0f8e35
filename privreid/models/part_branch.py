"""FedARKS' body-part branch (Xu et al., paper 001, Sec. 3.2, Eq. 1): three horizontal bands of the ``layer4``
map (:data:`PART_BANDS`), each average-pooled, concatenated and embedded by ``fc`` + ``bn``; :func:`fuse` gives
``theta = v * global + (1 - v) * part`` (Eq. 1). The ``part_branch`` transform installs it as ``ReIDModel.part``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: FedARKS body-part bands as fractions of the feature-map height (top = 0):
#: head / shoulders, torso (shoulders to hips), legs.  The paper segments the
#: parts with PifPaf keypoints; no pose model is available offline, so privreid
#: uses these fixed bands of an upright pedestrian crop (hips at about 55 % of
#: the height).  Dataset-provided keypoints / part boxes are not yet supported.
PART_BANDS: tuple[tuple[float, float], ...] = ((0.0, 0.25), (0.25, 0.55), (0.55, 1.0))


def band_rows(height: int, bands=PART_BANDS) -> list[tuple[int, int]]:
    """Row ranges ``[start, end)`` of ``bands`` on a map of ``height`` rows, rounded half up; every band keeps a
    row, so on very short maps (2 rows at 32-pixel images) neighbours share one."""
    rows = []
    for lo, hi in bands:
        start = min(int(math.floor(lo * height + 0.5)), height - 1)
        end = max(int(math.floor(hi * height + 0.5)), start + 1)
        rows.append((start, min(end, height)))
    return rows


class PartBranch(nn.Module):
    """FedARKS' body-part branch: band pooling -> ``fc: Linear(n_bands * C, dim)`` -> ``bn``; one linear layer
    over the concatenated bands is the sum of one embedding per part, Eq. 1's "combined body part feature";
    ``fusion_weight`` is Eq. 1's ``v`` (the global feature's weight)."""

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
