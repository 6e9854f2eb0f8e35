"""FedReID (Wu & Gong, *Decentralised Learning from Independent Multi-Domain Labels*, paper 002).

* Model: the client is an embedding network (backbone + neck, shared) and a mapping network, the 2-FC head of Eq. 7
  (FC -> BN -> ReLU -> Dropout -> FC), which never leaves the client (model transform ``mlp_head``).  Its activation
  is the reference code's ``LeakyReLU(0.1)`` (SunTongtongtong/FedReid ``lib/model.py``, ``MLP``);
  ``--opt mapping_slope=0`` is Eq. 7's ReLU.  The reference retrieves on the 2048-d pooled trunk feature with no neck
  (``--neck none``, the paper preset) and its mapping network reads that feature.
* Selection: a random fraction C = 0.5 of the clients per round (Sec. 4), ``ceil(C N)`` of them (Eq. 5).
* Client-server collaboration (Eq. 8, the method's client start): on receiving the server embedding theta^f, a client
  starts from the half-average ``(theta^f + omega^f) / 2`` of the server's and its own embedding as its last local
  training left it (on its first round from theta^f), with its own mapping network omega^c.
* Local objective (Eq. 3): the identity loss (Eq. 10) plus the server regularisation (Eq. 11-13),
  ``gamma * KL(Q || P)`` between the softened (temperature T) predictions of the server copy, Q, and of the client
  model, P, with T = 3 and gamma = T^2.  The server copy computes ``d'`` with theta^f and the client's mapping network
  omega^c (Eq. 12).  It starts from the received theta^f, free of Eq. 15's noise, which goes on the client's own start
  model (:mod:`privreid.defenses.beta_noise.mechanism`; with upload noise theta^f is Eq. 14's noisy aggregate
  itself), and theta^f is "optimised on-the-fly with Eq. (10)": the copy's identity loss trains the copy's embedding
  only.  omega^c enters that loss detached, and its BatchNorm statistics are updated on a throw-away copy, so the
  mapping network is trained by the client's own losses alone.  The copy is never transmitted.  Choice: Q is the
  teacher, so the KL term does not back-propagate into the copy.  Both identity losses use ``--label-smoothing`` (the
  paper's Eq. 10 is plain cross-entropy: 0).
* Server (Eq. 9): unweighted mean of the uploaded embeddings.
* Privacy (Eq. 14/15): ``--beta`` with ``--beta-mode``, a defense available to every method
  (:mod:`privreid.defenses.beta_noise.mechanism`): upload noise on the aggregate theta^f, download noise on
  ``{(theta^f + omega^f) / 2, omega^c}`` (after this method's half-average), trainable parameters only.

Evaluation.  The global model is the server embedding theta^f ("at test time, the centralised server model is used",
Sec. 3).  A client's personalised model (``load_model(ckpt, client=NAME)``) is its client model as its last local
training left it: its embedding omega^f (kept in its memory, ``keeps_trained_model``) with its mapping network; a
client not selected yet has the server embedding.

Cost: local training runs two embedding networks (client and server copy), about twice FedPav's compute; the client
memory holds one embedding copy.  The paper's learning rates (0.01 embedding, 0.1 mapping, decay 0.1 after 20 rounds,
Nesterov SGD) are ``--lr-backbone 0.01 --lr-head 0.1 --lr-step 20``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.func import functional_call

from privreid.checkpoint import TRAINED_PREFIX
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL, StateDict
from privreid.federated.registry import Method, register
from privreid.federated.strategy import UniformAverage


def server_regularisation(client_logits: torch.Tensor, server_logits: torch.Tensor, temperature: float,
                          gamma: float) -> torch.Tensor:
    """Eq. 11-13: ``gamma * KL(Q || P)``, batch mean; Q (server) is the detached teacher."""
    log_p = F.log_softmax(client_logits / temperature, dim=1)
    q = F.softmax(server_logits.detach() / temperature, dim=1)
    return gamma * F.kl_div(log_p, q, reduction="batchmean")


def half_average_start(ctx: ClientContext) -> None:
    """Eq. 8: the embedding becomes ``(received theta^f + own omega^f) / 2`` (omega^f from the client's memory)."""
    previous = {k[len(TRAINED_PREFIX):]: v for k, v in ctx.memory.items() if k.startswith(TRAINED_PREFIX)}
    if not previous:  # first participation: omega^f = theta^f
        return
    shared = CLASSIFIER_LOCAL.shared(ctx.model.state_dict())
    ctx.model.load_state_dict({k: _half_average(v, previous[k].to(v.device)) for k, v in shared.items()},
                              strict=False)


def server_logits(model: torch.nn.Module, server_state: StateDict, images: torch.Tensor) -> torch.Tensor:
    """``d'`` (Eq. 12): the server copy's embedding with the client's mapping network, which it does not train.

    The mapping network's parameters enter detached; its buffers (BatchNorm
    running statistics) are copies, so their updates are dropped.  The copy's
    own buffers in ``server_state`` are updated in place, as in the copy's
    training.
    """
    feat = functional_call(model, server_state, (images,), strict=False)
    head = {k: v.detach() for k, v in model.classifier.named_parameters()}
    head.update({k: v.clone() for k, v in model.classifier.named_buffers()})
    return functional_call(model.classifier, head, (feat,))


#: the mapping network's LeakyReLU slope in the authors' code (SunTongtongtong/FedReid ``lib/model.py``, ``MLP``)
WU_GONG_SLOPE = 0.1


@dataclass(frozen=True)
class FedReIDOptions:
    """FedReID's method options (paper 002)."""

    #: temperature T of the softened predictions (Eq. 11-13)
    temperature: float = 3.0
    #: weight gamma of the KL term (``None``: T^2)
    gamma: float | None = None
    #: negative slope of the mapping network's activation (reference code: LeakyReLU(0.1); Eq. 7's ReLU: 0)
    mapping_slope: float = WU_GONG_SLOPE


def mapping_head(slope: float) -> dict:
    """The ``mlp_head`` model transform, activation slope ``slope`` (:func:`privreid.models.transforms.mlp_head`)."""
    return {"name": "mlp_head", "negative_slope": slope}


class FedReIDUpdate(SupervisedUpdate):
    """Identity loss + server regularisation with an on-the-fly server copy (Eq. 3, 10-13).

    Extra metrics: ``server_id_loss`` (the copy's identity loss) and
    ``server_kl`` (Eq. 13), means over the steps.
    """

    def __init__(self, config):
        super().__init__(config)
        self.temperature = float(FEDREID.option(config, "temperature"))
        gamma = FEDREID.option(config, "gamma")
        self.gamma = self.temperature ** 2 if gamma is None else float(gamma)

    @staticmethod
    def make_server_copy(ctx: ClientContext) -> StateDict:
        """theta^f as received, on the training device; its trainable parameters require gradients."""
        params = dict(ctx.model.named_parameters())
        return {k: v.detach().clone().to(ctx.device).requires_grad_(k in params and params[k].requires_grad)
                for k, v in ctx.global_state.items()}

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        self.server_copy = self.make_server_copy(ctx)
        self._sums = {"server_id_loss": 0.0, "server_kl": 0.0}
        self._steps = 0
        try:
            metrics = super().__call__(ctx)
        finally:
            del self.server_copy
        metrics.update({k: v / max(self._steps, 1) for k, v in self._sums.items()})
        return metrics

    def optimizer(self, model, round_index):
        opt = super().optimizer(model, round_index)
        copy_params = [v for v in self.server_copy.values() if v.requires_grad]
        opt.add_param_group({"params": copy_params, "lr": opt.param_groups[0]["lr"]})
        return opt

    def server_losses(self, ctx: ClientContext, logits: torch.Tensor,
                      labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(identity loss of the server copy (Eq. 10 on d'), Eq. 13)`` on the current batch."""
        d_prime = server_logits(ctx.model, self.server_copy, ctx.images)
        return self.criterion(d_prime, labels), server_regularisation(logits, d_prime, self.temperature, self.gamma)

    def extra_loss(self, ctx, pre_neck, feat, logits, labels):
        server_id, kl = self.server_losses(ctx, logits, labels)
        self._sums["server_id_loss"] += float(server_id.detach())
        self._sums["server_kl"] += float(kl.detach())
        self._steps += 1
        return server_id + kl


def _half_average(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a + b) / 2 if torch.is_floating_point(a) else a


FEDREID = register(
    Method(
        name="fedreid",
        dp_sgd_support="no (its client update trains tensors outside the model)",
        summary="FedReID: half-averaged start, server-copy KL regularisation, 2-FC local mapping (paper 002)",
        policy=CLASSIFIER_LOCAL,
        make_client_update=FedReIDUpdate,
        make_strategy=lambda config, model_config: UniformAverage(),
        needs_per_client_uploads=False,
        make_client_start=lambda config: half_average_start,
        options=FedReIDOptions,
        model_transforms=lambda config: [mapping_head(float(FEDREID.option(config, "mapping_slope")))],
        client_fraction=0.5,
        keeps_trained_model=True,
    )
)
