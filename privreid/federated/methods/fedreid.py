"""FedReID (Wu & Gong, *Decentralised Learning from Independent Multi-Domain Labels*, paper 002).

* Model: the client is an embedding network (backbone + neck, shared) and a
  mapping network, the 2-FC head of Eq. 7 (FC -> BN -> ReLU -> Dropout -> FC),
  which never leaves the client (``model_overrides={"head": "mlp"}``).
* Selection: a random fraction C = 0.5 of the clients per round (Sec. 4).
* Client-server collaboration (Eq. 8): on receiving the server embedding
  theta^f, a client starts from the half-average ``(theta^f + omega^f_prev) / 2``
  of the server's and its own previous embedding (kept in the client's
  memory; on its first round it starts from theta^f).
* Local objective: identity loss (Eq. 10) plus the server regularisation
  (Eq. 11-13): ``gamma * KL(Q || P)`` between the softened (temperature T)
  predictions of an on-the-fly copy of the server model, Q, and of the
  client model, P, with T = 3 and gamma = T^2.  The server copy is theta^f
  with the client's own mapping network; it is itself optimised with the
  identity loss during local training ("theta^f in the local will also be
  optimised on-the-fly with Eq. (10)") and is never transmitted.  Choice:
  Q is the teacher, so the KL term does not back-propagate into the copy.
* Server (Eq. 9): unweighted mean of the uploaded embeddings.
* Privacy (Eq. 14/15): ``--beta`` with ``--beta-mode``, a defence available to
  every method (:mod:`privreid.defenses.beta_noise`).  Deviation: Eq. 15
  puts the noise on the half-averaged model; privreid adds it to what the
  server transmits, so after the client's half-average its scale is beta/2
  and the never-transmitted mapping network stays noise-free.

Cost: local training runs two embedding networks (client and server copy),
about twice FedPav's compute; the client memory holds one embedding copy.
The paper's learning rates (0.01 embedding, 0.1 mapping, decay 0.1 after 20
rounds, Nesterov SGD) are ``--lr-backbone 0.01 --lr-head 0.1 --lr-step 20``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from ..client import ClientContext, SupervisedUpdate
from ..policy import CLASSIFIER_LOCAL
from ..registry import Method, register
from ..strategy import UniformAverage

MEMORY_KEY = "embedding/"


def server_regularisation(client_logits: torch.Tensor, server_logits: torch.Tensor, temperature: float,
                          gamma: float) -> torch.Tensor:
    """Eq. 11-13: ``gamma * KL(Q || P)``, batch mean; Q (server) is the detached teacher."""
    log_p = F.log_softmax(client_logits / temperature, dim=1)
    q = F.softmax(server_logits.detach() / temperature, dim=1)
    return gamma * F.kl_div(log_p, q, reduction="batchmean")


class FedReIDUpdate(SupervisedUpdate):
    """Half-averaged start (Eq. 8) + identity loss + server regularisation with an on-the-fly server copy."""

    def __init__(self, config):
        super().__init__(config)
        self.temperature = float(FEDREID.option(config, "temperature"))
        gamma = FEDREID.option(config, "gamma")
        self.gamma = self.temperature ** 2 if gamma is None else float(gamma)

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        model = ctx.model
        shared = CLASSIFIER_LOCAL.shared(model.state_dict())
        previous = {k[len(MEMORY_KEY):]: v for k, v in ctx.memory.items() if k.startswith(MEMORY_KEY)}
        if previous:  # Eq. 8
            model.load_state_dict({k: _half_average(shared[k], previous[k].to(shared[k].device)) for k in shared},
                                  strict=False)
        params = dict(model.named_parameters())
        self.server_copy = {k: v.detach().clone().to(ctx.device).requires_grad_(k in params and params[k].requires_grad)
                            for k, v in ctx.global_state.items()}
        try:
            metrics = super().__call__(ctx)
        finally:
            del self.server_copy
        for k, v in CLASSIFIER_LOCAL.shared(model.state_dict()).items():
            ctx.memory[MEMORY_KEY + k] = v.detach().to("cpu", copy=True)
        return metrics

    def optimizer(self, model, round_index):
        opt = super().optimizer(model, round_index)
        copy_params = [v for v in self.server_copy.values() if v.requires_grad]
        opt.add_param_group({"params": copy_params, "lr": opt.param_groups[0]["lr"]})
        return opt

    def extra_loss(self, ctx, pre_neck, feat, logits, labels):
        """Identity loss of the server copy (on the fly) + Eq. 13."""
        server_logits = _server_logits(ctx.model, self.server_copy, ctx.images)
        return self.criterion(server_logits, labels) + server_regularisation(logits, server_logits,
                                                                              self.temperature, self.gamma)


def _server_logits(model, server_state, images):
    """Logits of the server copy: its embedding weights with the client's mapping network."""
    feat = functional_call(model, server_state, (images,), strict=False)
    return model.classifier(feat)


def _half_average(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a + b) / 2 if torch.is_floating_point(a) else a


FEDREID = register(
    Method(
        name="fedreid",
        summary="FedReID: half-averaged download, server-copy KL regularisation, 2-FC local mapping (paper 002)",
        policy=CLASSIFIER_LOCAL,
        make_client_update=FedReIDUpdate,
        make_strategy=lambda config: UniformAverage(),
        options={"temperature": 3.0, "gamma": None},
        model_overrides={"head": "mlp"},
        client_fraction=0.5,
    )
)
