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
  BatchNorm-ed embedding (linear neck or BNNeck), whose sum can be negative,
  which flips the rule (``feature_sign``).
* **sign by gradient matching** (:func:`matched_sign_label`, privreid's
  extension of iDLG for heads without a bias): both signs are tried.  The
  gradient is rank one, ``dL/dW = g a^T``; with ``v`` its top right singular
  vector, sign ``s`` means ``a = lam v_s`` (``v_s = +-v`` with
  ``sign(sum v_s) = s``, ``lam > 0``), so ``g = dL/dW v_s / lam`` and the label
  is ``argmin_c (dL/dW v_s)_c``, iDLG's rule under that sign.  The head's
  weights ``W`` (known to an attacker who sees the head's gradient) predict
  the same quantity, ``lam (softmax(lam W v_s) - q)``; the sign whose best
  ``lam`` (a log-spaced search) matches the observed ``dL/dW v_s`` more
  closely wins.  For the true sign the match is exact without noise; for
  the other it cannot be, because ``softmax - q`` has at most one negative
  entry while the flipped gradient has ``K - 1``.

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


def matched_sign_label(weight_grad: torch.Tensor, weight: torch.Tensor, label_smoothing: float = 0.0) -> int:
    """iDLG's rule under the sign of ``sum_j a_j`` whose head reproduces the gradient (module docstring).

    ``weight_grad`` and ``weight`` are the ``(classes, features)`` gradient and
    weights of a bias-free last layer; ``label_smoothing`` is the loss's.
    """
    if weight_grad.ndim != 2 or weight_grad.shape[0] < 2 or weight.shape != weight_grad.shape:
        raise ConfigError(f"weight gradient and weights must be equal (classes >= 2, features) matrices, got "
                          f"{tuple(weight_grad.shape)} and {tuple(weight.shape)}")
    grad, weight = weight_grad.detach().double(), weight.detach().double()
    v = torch.linalg.svd(grad, full_matrices=False).Vh[0]
    classes = grad.shape[0]
    best: tuple[float, int] | None = None
    for sign in (1.0, -1.0):
        v_s = v * (sign if float(v.sum()) >= 0 else -sign)
        observed = grad @ v_s
        label = int(torch.argmin(observed))
        target = torch.full((classes,), label_smoothing / classes, dtype=grad.dtype)
        target[label] += 1.0 - label_smoothing
        logits = weight @ v_s
        loss = _best_scale_mismatch(logits, target, observed)
        if best is None or loss < best[0]:
            best = (loss, label)
    return best[1]


def _best_scale_mismatch(logits: torch.Tensor, target: torch.Tensor, observed: torch.Tensor) -> float:
    """``min_lam ||lam (softmax(lam logits) - target) - observed||^2`` over a log grid, refined once."""
    scales = torch.logspace(-4, 6, 1001, dtype=logits.dtype)
    for _ in range(2):
        predicted = scales[:, None] * (torch.softmax(scales[:, None] * logits[None], dim=1) - target[None])
        losses = (predicted - observed[None]).pow(2).sum(dim=1)
        i = int(torch.argmin(losses))
        low, high = scales[max(i - 1, 0)], scales[min(i + 1, len(scales) - 1)]
        scales = torch.logspace(float(low.log10()), float(high.log10()), 1001, dtype=logits.dtype)
    return float(losses[i])
