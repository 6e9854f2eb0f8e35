"""Label inference from the gradient of a classifier's last linear layer (one image, cross-entropy).

For one image with logits ``o = W a + b``, ``p = softmax(o)`` and target distribution ``q``:

    dL/db_c = p_c - q_c,        dL/dW_c = (p_c - q_c) a,

so ``g_c = p_c - q_c`` is most negative at the true class ``t``:

* **bias-gradient sign rule**: ``t = argmin_c dL/db_c``.
* **iDLG rule** (Zhao, Mopuri & Bilen, "iDLG", 2020, Sec. 3.1): ``t = argmin_c sum_j dL/dW_cj``, since
  ``sum_j dL/dW_cj = g_c * sum_j a_j``; it assumes ``sum_j a_j > 0`` (ReLU features). privreid's head reads a
  BatchNorm-ed embedding whose sum can be negative, which flips the rule (``feature_sign``).
* **sign by gradient matching** (:func:`matched_sign_label`, privreid's extension for bias-free heads): with
  ``v`` the top right singular vector of the rank-one ``dL/dW = g a^T``, sign ``s`` means ``a = lam v_s``
  (``lam > 0``), so the label is ``argmin_c (dL/dW v_s)_c``. The head's ``W`` predicts that quantity as
  ``lam (softmax(lam W v_s) - q)``; the sign whose best ``lam`` (log-spaced search) matches better wins. The
  true sign matches exactly without noise; the other cannot (``softmax - q`` has one negative entry, the
  flipped gradient ``K - 1``).

With label smoothing ``epsilon`` over ``K`` classes both rules hold while the true class's probability is below
``1 - epsilon`` (then ``g_t < -epsilon / K <= g_c``); a more confident model can fool them, so privreid reports
whether the inferred label was right.

**Batches** (``B`` images, mean loss): ``-B dL/db_c = n_c - sum_i p_ic``, a count minus the model's probability
mass on ``c`` (no smoothing). The count rule of Wainakh et al. ("User-Level Label Leakage from Gradients in
Federated Learning", PETS 2022, LLG) and Geng et al. (2021) reads counts greedily: take the largest score, lower
it by one image's impact, ``B`` times (:func:`count_labels`). With a bias the impact is 1
(:func:`bias_count_labels`); without one the score is the weight gradient row's norm (about ``||a_i|| / B`` per
image of ``c``, ``p_ic ||a_i|| / B`` for an absent class) and the impact the median of the ``B`` largest rows
(:func:`norm_count_labels`). Both assume a model not yet confident on the batch; privreid reports the accuracy.
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


def count_labels(scores: torch.Tensor, batch: int, impact: float) -> list[int]:
    """``batch`` labels, sorted: ``batch`` times the class of the largest remaining score, whose score then drops
    by ``impact`` (one image's share; module docstring)."""
    if scores.ndim != 1 or scores.numel() < 2:
        raise ConfigError(f"label scores must be a vector over >= 2 classes, got shape {tuple(scores.shape)}")
    if batch < 1:
        raise ConfigError(f"the batch must hold >= 1 image (got {batch})")
    remaining = scores.detach().double().clone()
    labels = []
    for _ in range(batch):
        c = int(torch.argmax(remaining))
        labels.append(c)
        remaining[c] -= impact
    return sorted(labels)


def bias_count_labels(bias_grad: torch.Tensor, batch: int) -> list[int]:
    """A batch's labels from the last layer's bias gradient: :func:`count_labels` of ``-B dL/db`` with impact 1."""
    if bias_grad.ndim != 1:
        raise ConfigError(f"bias gradient must be a vector, got shape {tuple(bias_grad.shape)}")
    return count_labels(-batch * bias_grad, batch, 1.0)


def norm_count_labels(weight_grad: torch.Tensor, batch: int) -> list[int]:
    """A batch's labels from a bias-free last layer's ``(classes, features)`` weight gradient: :func:`count_labels`
    of its row norms, one image's impact the median of the ``batch`` largest."""
    if weight_grad.ndim != 2 or weight_grad.shape[0] < 2:
        raise ConfigError(f"weight gradient must be (classes >= 2, features), got shape {tuple(weight_grad.shape)}")
    norms = weight_grad.detach().double().norm(dim=1)
    impact = float(norms.topk(min(batch, len(norms))).values.median())
    return count_labels(norms, batch, impact)


def assign_labels(recovered: list[int], true: list[int]) -> list[int]:
    """Per image of a batch, the recovered label credited to it: the recovered multiset matched to the true
    labels (each true label that the multiset holds is credited once, in order; the recovered labels left over go
    to the rest).  The number of matches is the multiset overlap, the batch's label accuracy times ``B``."""
    if len(recovered) != len(true):
        raise ConfigError(f"{len(recovered)} recovered label(s) for {len(true)} image(s)")
    left = list(recovered)
    credited: list[int | None] = []
    for y in true:
        if y in left:
            left.remove(y)
            credited.append(y)
        else:
            credited.append(None)
    return [y if y is not None else left.pop(0) for y in credited]
