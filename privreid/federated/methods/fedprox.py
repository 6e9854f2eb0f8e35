"""FedProx+D: FedAvg with a proximal term in the local objective.

Li, Sahu, Zaheer, Sanjabi, Talwalkar & Smith, "Federated Optimization in Heterogeneous Networks", MLSys 2020,
Algorithm 2 / Eq. (2): client ``k`` (approximately) minimises

    h_k(w; w^t) = F_k(w) + (mu / 2) * ||w - w^t||^2

where ``F_k`` is its usual local loss and ``w^t`` the global model it received at the start of round ``t``.  The term
pulls the local model back towards the global one, limiting client drift under non-IID data; the server aggregates
exactly as FedAvg.

"+D" (SKA, paper 000, Table 2): the identity classifier is local.

Versus ``fedpav``: same policy (classifier local, everything else shared, BatchNorm running statistics included) and
server strategy (data-volume average); only the client objective adds the proximal term.  With ``mu=0`` it is exactly
``fedpav``.

Details:

* The term runs over the **shared parameters only** (``model.named_parameters()`` whose names are keys of the global
  state: not the local classifier, not buffers).  Frozen parameters (``requires_grad=False``, e.g. BNNeck's bias) are
  left out; they cannot move.
* The anchor ``w^t`` is ``ctx.global_state``, the global state as this client received it (download-side beta noise,
  FedReID Eq. 15, perturbs the model the client starts from, not the anchor), moved to the training device once per
  round.  Memory: on the CPU nothing (the anchors are the received tensors, only read); on an accelerator one copy of
  the shared parameters for the round.
* The term is added to the loss at every step (the gradient ``mu * (w - w^t)``), equivalent to FedProx's
  perturbed-gradient solver.  At the first step ``w = w^t``, so it acts from the second local step on.

Personalised model (seen domains), as for SKA's other Table 2 "+D" baselines: the model the client holds after the
round's aggregation (the global model with its classifier); ``load_model(ckpt, client=NAME)`` returns it.

Option ``mu`` (``--opt mu=...``, default 0.01).  The SKA paper does not state its value.  FedProx selects ``mu`` per
dataset from {0.001, 0.01, 0.1, 1}; 0.01 is a middle value of that grid, not tuned for ReID.  Tune it for a real
comparison.
"""

from __future__ import annotations

import torch

from dataclasses import dataclass

from privreid.errors import ConfigError
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.federated.registry import Method, register
from privreid.federated.strategy import DataVolumeAverage


def proximal_term(params: list[torch.Tensor], anchors: list[torch.Tensor], mu: float) -> torch.Tensor:
    """``(mu / 2) * sum_i ||params_i - anchors_i||^2`` (differentiable in ``params``)."""
    if len(params) != len(anchors):
        raise ValueError("one anchor per parameter is required")
    if not params:
        return torch.zeros(())
    sq = torch.stack([(p - a).pow(2).sum() for p, a in zip(params, anchors)]).sum()
    return 0.5 * mu * sq


def shared_parameters(model: torch.nn.Module, shared_keys) -> list[tuple[str, torch.nn.Parameter]]:
    """The trainable parameters of ``model`` whose names are in ``shared_keys``."""
    keys = set(shared_keys)
    return [(n, p) for n, p in model.named_parameters() if n in keys and p.requires_grad]


class ProximalUpdate(SupervisedUpdate):
    """FedPav's client update plus ``(mu/2) ||w - w^t||^2`` over the shared parameters.

    Besides the base metrics it reports ``prox``, the mean proximal term per step.
    """

    def __init__(self, config, mu: float):
        super().__init__(config)
        self.mu = float(mu)
        self._params: list[torch.Tensor] = []
        self._anchors: list[torch.Tensor] = []
        self._prox_sum, self._prox_steps = 0.0, 0

    def anchor(self, ctx: ClientContext) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The shared parameters and their received values ``w^t`` on the training device."""
        named = shared_parameters(ctx.model, ctx.global_state.keys())
        return [p for _, p in named], [ctx.global_state[n].detach().to(ctx.device) for n, _ in named]

    def extra_loss(self, ctx, pre_neck, feat, logits, labels):
        if self.mu == 0.0:
            return None
        term = proximal_term(self._params, self._anchors, self.mu)
        self._prox_sum += float(term.detach())
        self._prox_steps += 1
        return term

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        self._params, self._anchors = self.anchor(ctx) if self.mu != 0.0 else ([], [])
        self._prox_sum, self._prox_steps = 0.0, 0
        try:
            metrics = super().__call__(ctx)
        finally:
            self._params, self._anchors = [], []  # release the anchor copy
        metrics["prox"] = self._prox_sum / max(self._prox_steps, 1)
        return metrics


@dataclass(frozen=True)
class FedProxOptions:
    """FedProx's method options."""

    #: weight mu of the proximal term (mu/2)||w - w_global||^2
    mu: float = 0.01


def make_client_update(config) -> ProximalUpdate:
    mu = FEDPROX.option(config, "mu")  # a float (FedProxOptions); its range is checked here
    if mu < 0:
        raise ConfigError(f"fedprox option mu must be a number >= 0, got {mu!r}")
    return ProximalUpdate(config, mu=mu)


FEDPROX = register(
    Method(
        name="fedprox",
        dp_sgd_support="yes (with --opt mu=0: the proximal term is not a sum of per-sample gradients)",
        summary="FedProx+D (Li et al. 2020): local loss + (mu/2)||w - w_global||^2 on shared weights",
        policy=CLASSIFIER_LOCAL,
        make_client_update=make_client_update,
        make_strategy=lambda config, model_config: DataVolumeAverage(),
        needs_per_client_uploads=False,
        options=FedProxOptions,
    )
)
