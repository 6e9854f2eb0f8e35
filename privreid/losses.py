"""Training losses.

* Identity loss: cross-entropy with label smoothing (Szegedy et al. 2016), torch's built-in.  ``--label-smoothing``
  (default 0.1, as torchreid / BoT) reaches every identity loss of every method; the five papers privreid implements,
  and their released code, use plain cross-entropy (0, what their presets set).
* Batch-hard triplet loss (Hermans et al. 2017): for each anchor, the hardest positive and hardest negative in the
  batch, ``max(0, d_ap - d_an + margin)`` on Euclidean distances of the (pre-neck) features.
* Circle loss (Sun et al. 2020), pairwise form on the cosine similarities of a batch: :func:`circle_loss`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def identity_loss(label_smoothing: float = 0.1) -> nn.Module:
    """``(1 - eps) CE(y) + eps * mean_c CE(c)``: cross-entropy with label smoothing ``eps`` (0: plain)."""
    return nn.CrossEntropyLoss(label_smoothing=label_smoothing)


def batch_hard_triplet_loss(features: torch.Tensor, labels: torch.Tensor, margin: float = 0.3) -> torch.Tensor:
    """Batch-hard triplet loss; anchors without a positive or a negative are ignored (0, with a gradient path,
    when none has one).

    Chosen on the device, never read by the host (no synchronisation per step): the mean over every anchor when
    all are valid (always under P x K sampling, K >= 2, P >= 2), else the sum over the valid ones divided by
    their count."""
    dist = torch.cdist(features, features).clamp_min(1e-12)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    pos_mask = same & ~eye
    neg_mask = ~same
    valid = pos_mask.any(1) & neg_mask.any(1)
    hardest_pos = dist.masked_fill(~pos_mask, float("-inf")).amax(1)
    hardest_neg = dist.masked_fill(~neg_mask, float("inf")).amin(1)
    losses = F.relu(hardest_pos - hardest_neg + margin)
    some = torch.where(valid, losses, 0.0).sum() / valid.sum().clamp_min(1)
    return torch.where(valid.all(), losses.mean(), torch.where(valid.any(), some, features.sum() * 0.0))


def circle_loss(features: torch.Tensor, labels: torch.Tensor, margin: float = 0.45,
                gamma: float = 64.0) -> torch.Tensor:
    """Pairwise circle loss (Sun et al., "Circle Loss: A Unified Perspective of Pair Similarity
    Optimization", CVPR 2020, Eq. 6 with the self-paced weights of Eq. 8 and the margins of Eq. 7).

    For every anchor of the batch, with ``s_p`` the cosine similarities to its
    other same-label samples and ``s_n`` to its different-label samples::

        L = log(1 + sum_n exp(gamma * a_n * (s_n - d_n)) * sum_p exp(-gamma * a_p * (s_p - d_p)))
        a_p = [1 + m - s_p]_+,  a_n = [s_n + m]_+,  d_p = 1 - m,  d_n = m

    computed as ``softplus(logsumexp(n-terms) + logsumexp(p-terms))``; the weights ``a_p`` and ``a_n`` are constants
    (no gradient), as in the paper.  The result is the mean over anchors with at least one positive and one negative
    (0, with a gradient path, when none has).  The L2RW reference code (Joey623/L2RW ``CI/loss.py:47``) averages over
    all anchors, an anchor without a positive counting 0: identical under P x K sampling, which both use.

    Defaults ``margin=0.45`` and ``gamma=64`` are those of the L2RW / L2RW+ reference code (paper 003's baseline
    loss); Sun et al. report ``m=0.25``.  ``features`` need not be normalised: the loss normalises them.
    """
    z = F.normalize(features, dim=1)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    pos_mask, neg_mask = same & ~eye, ~same
    valid = pos_mask.any(1) & neg_mask.any(1)
    # an anchor without both kinds of pairs would be a row of -inf (NaN gradients in logsumexp): its row keeps
    # every entry and its loss is then dropped, chosen on the device (no synchronisation per step)
    pos_mask, neg_mask = pos_mask | ~valid[:, None], neg_mask | ~valid[:, None]
    sim = z @ z.T
    alpha_p = (1 + margin - sim.detach()).clamp_min(0)
    alpha_n = (sim.detach() + margin).clamp_min(0)
    logit_p = (-gamma * alpha_p * (sim - (1 - margin))).masked_fill(~pos_mask, float("-inf"))
    logit_n = (gamma * alpha_n * (sim - margin)).masked_fill(~neg_mask, float("-inf"))
    losses = F.softplus(torch.logsumexp(logit_p, dim=1) + torch.logsumexp(logit_n, dim=1))
    some = torch.where(valid, losses, 0.0).sum() / valid.sum().clamp_min(1)
    return torch.where(valid.all(), losses.mean(), torch.where(valid.any(), some, features.sum() * 0.0))
