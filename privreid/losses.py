"""Training losses.

* Identity loss: cross-entropy with label smoothing (Szegedy et al. 2016), as
  used by torchreid / BoT (epsilon = 0.1); torch's built-in implementation.
* Batch-hard triplet loss (Hermans et al. 2017): for each anchor, the hardest
  positive and hardest negative in the batch, ``max(0, d_ap - d_an + margin)``
  on Euclidean distances of the (pre-neck) features.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def identity_loss(label_smoothing: float = 0.1) -> nn.Module:
    return nn.CrossEntropyLoss(label_smoothing=label_smoothing)


def batch_hard_triplet_loss(features: torch.Tensor, labels: torch.Tensor, margin: float = 0.3) -> torch.Tensor:
    """Batch-hard triplet loss; anchors without a positive or a negative are ignored."""
    dist = torch.cdist(features, features).clamp_min(1e-12)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    pos_mask = same & ~eye
    neg_mask = ~same
    valid = pos_mask.any(1) & neg_mask.any(1)
    if not valid.any():
        return features.sum() * 0.0
    hardest_pos = dist.masked_fill(~pos_mask, float("-inf")).amax(1)
    hardest_neg = dist.masked_fill(~neg_mask, float("inf")).amin(1)
    return F.relu(hardest_pos - hardest_neg + margin)[valid].mean()
