"""Label inference from the gradient of a classifier's last linear layer (one image, cross-entropy).

For one image with logits ``o = W a + b`` and the cross-entropy loss against
the target distribution ``q``, the gradients of the last layer are

    dL/db_c = p_c - q_c,        dL/dW_c = (p_c - q_c) a,

with ``p = softmax(o)``.  Only the true class ``t`` has ``q_t`` large, so
``g_c = p_c - q_c`` is most negative at ``t``:

* **bias-gradient sign rule**: ``t = argmin_c dL/db_c``.  Needs a bias, nothing
  else.
* **iDLG rule** (Zhao, Mopuri & Bilen, "iDLG: Improved Deep Leakage from
  Gradients", 2020, Sec. 3.1): ``t = argmin_c sum_j dL/dW_cj``, since
  ``sum_j dL/dW_cj = g_c * sum_j a_j``.  It assumes non-negative inputs ``a``
  (ReLU features), i.e. ``sum_j a_j > 0``.  privreid's identity head reads the
  BatchNorm-ed embedding, whose sum can be negative, which flips the rule; pass
  the sign of ``sum_j a_j`` as ``feature_sign`` when it is known (the threat
  models recover it from the bottleneck leak, :mod:`.threat_models`).

With label smoothing ``epsilon`` over ``K`` classes (``q_t = 1 - epsilon +
epsilon / K``, ``q_c = epsilon / K``) both rules stay correct while the model's
probability of the true class is below ``1 - epsilon``: then ``g_t < -epsilon /
K <= g_c`` for every other ``c``.  A model that already fits the image more
confidently than that can fool both rules; privreid reports whether the
inferred label was right instead of assuming it.
"""

from __future__ import annotations

import torch

from privreid.errors import ConfigError


def bias_sign_label(bias_grad: torch.Tensor) -> int:
    """The class whose bias gradient is most negative: ``argmin_c dL/db_c``."""
    if bias_grad.ndim != 1 or bias_grad.numel() < 2:
        raise ConfigError(f"bias gradient must be a vector over >= 2 classes, got shape {tuple(bias_grad.shape)}")
    return int(torch.argmin(bias_grad))


def idlg_label(weight_grad: torch.Tensor, feature_sign: float = 1.0) -> int:
    """iDLG: ``argmin_c feature_sign * sum_j dL/dW_cj`` for a ``(classes, features)`` weight gradient."""
    if weight_grad.ndim != 2 or weight_grad.shape[0] < 2:
        raise ConfigError(f"weight gradient must be (classes >= 2, features), got shape {tuple(weight_grad.shape)}")
    if feature_sign == 0:
        raise ConfigError("feature_sign must be positive or negative, not 0")
    return int(torch.argmin(weight_grad.sum(dim=1) * (1.0 if feature_sign > 0 else -1.0)))
