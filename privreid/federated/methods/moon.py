"""MOON+D: model-contrastive federated learning.

Li, He & Song, "Model-Contrastive Federated Learning", CVPR 2021, Eq. (1)-(3): the local objective is
``l_sup + mu * l_con`` with

    l_con = -log( exp(sim(z, z_glob)/tau) / (exp(sim(z, z_glob)/tau) + exp(sim(z, z_prev)/tau)) )

for every training image, ``sim`` the cosine similarity, ``z`` the representation of the image by the model being
trained, ``z_glob`` by the global model the client received this round and ``z_prev`` by the client's own model at the
end of its previous participation: the local representation is pulled towards the global one and away from the
previous local one, correcting client drift.  The server aggregates as FedAvg.

"+D" (SKA, paper 000, Table 2): the identity classifier is local.

Versus ``fedpav``: same policy (classifier local; backbone and neck shared, BatchNorm running statistics included)
and same server strategy (data-volume average); only the client objective adds ``mu * l_con`` (batch mean).  With
``mu=0``, and in a client's first participation (below), it is exactly ``fedpav``.

Choices:

* ``z`` is the model's **retrieval feature** (the neck output after its BN, ``ReIDModel.forward``), the input of the
  identity classifier: MOON's "representation" is the projection-head output that feeds the output layer; the linear
  neck plays the projection head.
* Defaults ``tau=0.5`` and ``mu=1``: MOON's default temperature is 0.5, and it tunes ``mu`` over {0.1, 1, 5, 10},
  reporting 1 as the best on CIFAR-100 and Tiny-ImageNet (5 on CIFAR-10).  The SKA paper does not state its values.
  Options ``--opt mu=... --opt tau=...``.
* The two reference models are frozen and run in inference mode: BatchNorm normalises with their stored running
  statistics, never updated (the received global state and the stored previous state are only read), and no graph
  is built (``torch.no_grad``).
* First participation (no previous model, e.g. round 1): the contrastive term is **skipped**, so the step is
  FedPav's.  The natural stand-in, the received global model, gives ``z_prev == z_glob``, where the term is the
  constant ``log 2`` with zero gradient (a test checks it): skipping changes the reported loss, not the training.
  The metric ``con_steps`` counts the steps where the term was applied.

Personalised model (seen domains), as for SKA's other Table 2 "+D" baselines: the model the client holds after the
round's aggregation (the global model with its classifier); ``load_model(ckpt, client=NAME)`` returns it.

Memory.  No extra model instance is built: the reference features come from ``torch.func.functional_call(model,
state, x)`` on the resident model with two state dicts, the received global model (``ctx.global_state``; for this
policy it holds every backbone and neck tensor) and the previous local model (``ctx.memory["prev_state"]``), moved
to the training device once per round.  Cost per client round: on the CPU no copy of either state; on an accelerator
two copies of the backbone+neck state; in every case two extra forward passes per step without activations kept for
backward (roughly two thirds more compute per step).  Between rounds each client keeps one backbone+neck state in
``ctx.memory["prev_state"]``, in a file under the run directory (:mod:`privreid.federated.memory_store`), so disk use,
not host memory, grows by one model per client (ResNet-18 with a 512-d neck: about 45 MB; ResNet-50: about 100 MB).
It never leaves the client.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from dataclasses import dataclass

from privreid.errors import ConfigError
from privreid.models.reid_net import is_classifier_key
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL, StateDict, clone_state
from privreid.federated.registry import Method, register
from privreid.federated.strategy import DataVolumeAverage

#: ``ctx.memory`` key of the client's previous local model (backbone + neck state)
PREV_STATE = "prev_state"


def model_contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor,
                           tau: float) -> torch.Tensor:
    """MOON's ``l_con`` (Eq. 2), averaged over the batch; ``(B, D)`` inputs."""
    pos = F.cosine_similarity(z, z_glob, dim=-1) / tau
    neg = F.cosine_similarity(z, z_prev, dim=-1) / tau
    logits = torch.stack([pos, neg], dim=1)
    # -log(e^pos / (e^pos + e^neg)) == cross-entropy with the positive as class 0
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


def representation_state(model: torch.nn.Module) -> StateDict:
    """The state that :meth:`ReIDModel.forward` uses: everything but the classifier."""
    return {k: v for k, v in model.state_dict().items() if not is_classifier_key(k)}


@torch.no_grad()
def reference_features(model: torch.nn.Module, state: StateDict, images: torch.Tensor) -> torch.Tensor:
    """``model(images)`` computed with ``state`` in place of the model's own tensors, in eval mode."""
    was_training = model.training
    model.eval()
    try:
        return functional_call(model, state, (images,))
    finally:
        model.train(was_training)


class ModelContrastiveUpdate(SupervisedUpdate):
    """FedPav's client update plus ``mu * l_con``; keeps the previous local model in ``ctx.memory``.

    Extra metrics: ``con`` (mean ``l_con`` over the steps where it applied) and
    ``con_steps``.
    """

    def __init__(self, config, mu: float, tau: float):
        super().__init__(config)
        self.mu, self.tau = float(mu), float(tau)
        self._glob: StateDict | None = None
        self._prev: StateDict | None = None
        self._con_sum, self._con_steps = 0.0, 0

    def extra_loss(self, ctx, pre_neck, feat, logits, labels):
        if self._glob is None or self._prev is None:
            return None
        z_glob = reference_features(ctx.model, self._glob, ctx.images)
        z_prev = reference_features(ctx.model, self._prev, ctx.images)
        con = model_contrastive_loss(feat, z_glob, z_prev, self.tau)
        self._con_sum += float(con.detach())
        self._con_steps += 1
        return self.mu * con

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        prev = ctx.memory.get(PREV_STATE)
        if prev is not None and self.mu != 0.0:  # else: first participation, plain FedPav step
            self._glob = {k: v.detach().to(ctx.device) for k, v in ctx.global_state.items()}
            self._prev = {k: v.to(ctx.device) for k, v in prev.items()}
        self._con_sum, self._con_steps = 0.0, 0
        try:
            metrics = super().__call__(ctx)
        finally:
            self._glob = self._prev = None
        ctx.memory[PREV_STATE] = clone_state(representation_state(ctx.model))
        metrics["con"] = self._con_sum / max(self._con_steps, 1)
        metrics["con_steps"] = float(self._con_steps)
        return metrics


@dataclass(frozen=True)
class MoonOptions:
    """MOON's method options."""

    #: weight mu of the model-contrastive loss
    mu: float = 1.0
    #: temperature tau of the model-contrastive loss
    tau: float = 0.5


def _option(config, key: str, *, positive: bool) -> float:
    """Option ``key`` (a float, typed by :class:`MoonOptions`) checked to be ``>= 0`` (``> 0`` if ``positive``)."""
    value = MOON.option(config, key)
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"moon option {key} must be a number {'> 0' if positive else '>= 0'}, got {value!r}")
    return value


def make_client_update(config) -> ModelContrastiveUpdate:
    mu = _option(config, "mu", positive=False)
    tau = _option(config, "tau", positive=True)
    return ModelContrastiveUpdate(config, mu=mu, tau=tau)


MOON = register(
    Method(
        name="moon",
        dp_sgd_support="yes",
        summary="MOON+D (Li et al. 2021): local loss + mu * model-contrastive loss on the retrieval feature",
        policy=CLASSIFIER_LOCAL,
        make_client_update=make_client_update,
        make_strategy=lambda config, model_config: DataVolumeAverage(),
        needs_per_client_uploads=False,
        options=MoonOptions,
    )
)
