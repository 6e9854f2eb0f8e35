"""Attentive normalisation (AN) for SKA (Wu & Gong, paper 000, Eq. 2).

SKA (Sec. 3.2) combines a BatchNorm's affine with an SE-style channel attention (Eq. 1) and, after Li, Sun &
Wu ("Attentive Normalization", ECCV 2020, ref. [17]), a mixture of ``M`` affine transforms:

    x_hat = (x - mu(x)) / sigma(x)                       (batch standardisation)
    lambda = act(FC(GAP(x) / sqrt(Var(x) + 1e-3)))  in R^{B x M}     (channel-attention unit)
    AN(x)  = sum_{i=1..M} lambda_i * (gamma_i * x_hat + beta_i)      (Eq. 2)

The attention reads the pooled feature over each instance's per-channel spatial std (unbiased, + 1e-3), as the
authors' code (SunTongtongtong/FedReid ``lib/AttNorm_AN.py:109-116``); a 1x1 map uses the biased one (0).
The module *is* an ``nn.BatchNorm2d(affine=False)`` (batch statistics in training, running ones in eval), so
BatchNorm-aware tools (:func:`privreid.models.replace_norm_layers`, FedBN) treat it as a norm layer. SKA puts
AN in place of each residual block's second BN (Sec. 4.2): :func:`apply_attentive_norm`. State:
``mix_weight`` / ``mix_bias`` ``(M, C)`` (gammas, betas), ``attention.weight`` ``(M, C)`` / ``.bias`` ``(M,)``,
and BatchNorm's running statistics.

Choices where SKA is silent: ``act`` ``"hsigmoid"`` (default, Li et al.'s gate), ``"sigmoid"`` or
``"softmax"``; ``M`` :data:`DEFAULT_COMPONENTS` (10, 10, 20, 20 per stage, Li et al.'s ResNet setting);
``gamma_i ~ N(1, 0.1^2)``, ``beta_i ~ N(0, 0.1^2)``, divided by ``M * act(0)`` so a fresh layer is a BatchNorm
with ``gamma ~ 1, beta ~ 0``. :meth:`AttentiveNorm2d.from_batchnorm` starts every component from a trained BN
(scaled the same way, running statistics copied), so ImageNet BN weights carry over (the paper's
ImageNet-pretrained AN weights are not available).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("hsigmoid", "sigmoid", "softmax")

#: added to the per-channel variance before the attention unit divides by its square root (reference code)
ATTENTION_VAR_EPS = 1e-3

#: mixture components M per ResNet stage (layer1..layer4)
DEFAULT_COMPONENTS: tuple[int, int, int, int] = (10, 10, 20, 20)


def _activate(logits: torch.Tensor, act: str) -> torch.Tensor:
    if act == "hsigmoid":
        return F.hardsigmoid(logits)
    if act == "sigmoid":
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=1)  # "softmax": AttentiveNorm2d refuses any other name


class AttentiveNorm2d(nn.BatchNorm2d):
    """Attentive normalisation, SKA Eq. 2: ``sum_i lambda_i(x) (gamma_i x_hat + beta_i)``; ``num_features``
    ``C``, ``num_components`` ``M``, ``act`` in :data:`ACTIVATIONS`, ``eps`` / ``momentum`` as BatchNorm2d."""

    def __init__(self, num_features: int, num_components: int = 10, act: str = "hsigmoid",
                 eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__(num_features, eps=eps, momentum=momentum, affine=False, track_running_stats=True)
        if num_components < 1:
            raise ValueError(f"num_components must be >= 1, got {num_components}")
        if act not in ACTIVATIONS:
            raise ValueError(f"unknown attention activation {act!r}; choose one of {', '.join(ACTIVATIONS)}")
        self.num_components = num_components
        self.act = act
        self.mix_weight = nn.Parameter(torch.empty(num_components, num_features))
        self.mix_bias = nn.Parameter(torch.empty(num_components, num_features))
        self.attention = nn.Linear(num_features, num_components)
        self.reset_mixture()

    def _init_scale(self) -> float:
        """``1 / (M * act(0))``: makes the initial mixture sum to one BatchNorm affine."""
        lam0 = float(_activate(torch.zeros(1, self.num_components), self.act)[0, 0])
        return 1.0 / (self.num_components * lam0)

    def reset_mixture(self, gamma: torch.Tensor | None = None, beta: torch.Tensor | None = None) -> None:
        """Initialise the mixture around ``(gamma, beta)`` (default 1, 0); attention FC to zero."""
        scale = self._init_scale()
        with torch.no_grad():
            g = torch.ones(self.num_features) if gamma is None else gamma.detach().float().cpu()
            b = torch.zeros(self.num_features) if beta is None else beta.detach().float().cpu()
            noise_g = torch.randn(self.num_components, self.num_features) * 0.1
            noise_b = torch.randn(self.num_components, self.num_features) * 0.1
            self.mix_weight.copy_((g + noise_g) * scale)
            self.mix_bias.copy_((b + noise_b) * scale)
            nn.init.zeros_(self.attention.weight)
            nn.init.zeros_(self.attention.bias)

    @classmethod
    def from_batchnorm(cls, bn: nn.modules.batchnorm._BatchNorm, num_components: int,
                       act: str = "hsigmoid") -> "AttentiveNorm2d":
        """An AN layer that starts from ``bn``: its statistics and (scaled) affine in every component."""
        an = cls(bn.num_features, num_components, act, eps=bn.eps,
                 momentum=bn.momentum if bn.momentum is not None else 0.1)
        an.reset_mixture(bn.weight if bn.affine else None, bn.bias if bn.affine else None)
        if bn.track_running_stats and bn.running_mean is not None:
            with torch.no_grad():
                an.running_mean.copy_(bn.running_mean)
                an.running_var.copy_(bn.running_var)
                an.num_batches_tracked.copy_(bn.num_batches_tracked)
        ref = next(iter([*bn.parameters(), *bn.buffers()]), None)
        if ref is not None:
            an.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point() else None)
        an.train(bn.training)
        return an

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """``lambda = act(FC(GAP(x) / sqrt(Var(x) + 1e-3)))``, shape ``(B, M)``; statistics per instance and channel."""
        flat = x.flatten(2)
        var = flat.var(dim=2, correction=1 if flat.shape[2] > 1 else 0)
        return _activate(self.attention(flat.mean(dim=2) * torch.rsqrt(var + ATTENTION_VAR_EPS)), self.act)

    def mix(self, x_hat: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        """Eq. 2 for given standardised features and attention weights."""
        gamma = lam @ self.mix_weight  # (B, C) = sum_i lambda_i gamma_i
        beta = lam @ self.mix_bias
        return x_hat * gamma[:, :, None, None] + beta[:, :, None, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_hat = super().forward(x)  # affine=False: batch / running standardisation only
        return self.mix(x_hat, self.attention_weights(x))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_components={self.num_components}, act={self.act}"


def second_norm_names(trunk: nn.Module) -> list[str]:
    """Qualified names of the second norm layer (``bn2``) of every residual block of a ResNet trunk."""
    names = []
    for name, module in trunk.named_modules():
        parts = name.split(".")
        if len(parts) == 3 and parts[0].startswith("layer") and parts[2] == "bn2" \
                and isinstance(module, nn.modules.batchnorm._BatchNorm):
            names.append(name)
    return names


def apply_attentive_norm(trunk: nn.Module, components: int | tuple[int, ...] | list[int] = DEFAULT_COMPONENTS,
                         act: str = "hsigmoid") -> list[str]:
    """Replace each residual block's second BatchNorm (``layerS.B.bn2``) by :class:`AttentiveNorm2d` started from
    it, in place; ``components``: one ``M`` or one per stage. Returns the replaced names."""
    per_stage = [int(components)] * 4 if isinstance(components, int) else [int(c) for c in components]
    if len(per_stage) != 4:
        raise ValueError(f"give one M or four (one per stage), got {components!r}")
    names = second_norm_names(trunk)
    for name in names:
        parent_name, _, attr = name.rpartition(".")
        parent = trunk.get_submodule(parent_name)
        stage = int(name.split(".")[0][len("layer"):]) - 1
        setattr(parent, attr, AttentiveNorm2d.from_batchnorm(getattr(parent, attr), per_stage[stage], act))
    return names
