"""FedPav's performance optimisations (Zhuang et al., paper 004, Sec. 5): CDW, KD, CC.

Five methods, each FedPav (:mod:`.fedpav`: shared backbone + neck, local classifiers) composed from three pieces:

* a **weighting** of the uploads: data volume ``n_k / n`` (Alg. 1 line 7) or the cosine distance weight (CDW, Eq. 2);
* a **client update**: FedPav's :class:`~privreid.federated.client.SupervisedUpdate`, wrapped for CDW by
  :class:`CosineDistanceProbe`, which measures Eq. 1 on a shared public batch around local training;
* a **server step** after the weighting: a plain weighted average, knowledge distillation on the public set (KD,
  :class:`DistilledAverage`, Alg. 3) or client clustering with FINCH (CC, :class:`ClusteredAverage`, Alg. 2).

===============  =========  ===========  =====================
method           weighting  client       server
===============  =========  ===========  =====================
fedpav-cdw       CDW        CDW probe    weighted average
fedpav-kd        volume     FedPav       average + KD
fedpav-cc        volume     FedPav       clustered average
fedpav-cdw-kd    CDW        CDW probe    average + KD (Alg. 3)
fedpav-cdw-cc    CDW        CDW probe    clustered (Alg. 2)
===============  =========  ===========  =====================

The paper does not combine KD and CC (Sec. 5.4), so neither does privreid.  Every method reads the public set of
:mod:`privreid.federated.public_data` (options ``public_data``, ``public_size``, ``public_batch``) and takes FedPav's
``bn_buffers`` (``first``: every weighted average of the method, each cluster's included, keeps its first upload's
BatchNorm buffers); the KD methods add ``kd_lr`` (0.0005, Sec. 3.5), ``kd_epochs`` (1) and ``kd_batch_size`` (32).

Design decisions
----------------

**CDW (Eq. 1-2).** Client ``k`` extracts the logits ``g^t`` of the model it loaded -- the received backbone with its
own classifier ``(w^t, v^t)``, footnote 4 -- on the shared batch ``B_shared``, trains, extracts ``g^{t+1}`` with
``(w^{t+1}, v^{t+1})`` and reports ``d = 1 - cos(g^t, g^{t+1})`` (Alg. 2 lines 16-21) as the scalar metric
``cdw_distance``, the only thing that reaches the server.  For a batch, Eq. 1 is taken per image and averaged (as the
authors' reference code does).  Logits are extracted in eval mode (independent of the batch composition) and without
touching the global random state.  ``B_shared`` is ``public_batch`` public images drawn with a seed of ``(run seed,
round)``: every client of a round measures on the *same* batch, so their distances are comparable (the reference
code measures on the client's own training data; privreid follows the paper's ``B_shared``).  The server's weights
are ``p_k = d_k / sum_j d_j`` (Eq. 2); if every distance is zero (nothing was learnt) it falls back to data volume.

**KD (Sec. 5.2, Alg. 3 lines 7-11).** The soft labels are **features**, not class probabilities: the clients'
classifiers are local and of different sizes, so the only output every client model and the global model share is
the retrieval feature (:meth:`ReIDModel.forward`); the reference code likewise distils the 512-d embedding with an
MSE loss.  The server computes them **itself**, running each uploaded shared state in one extra model on the public
set: nothing beyond the FedPav upload is transmitted (Fig. 3b also has the server generate them), and ``aggregate``
stays a pure function of the uploads and of the public images fixed at construction.  Then ``l = (1/K) sum_k l_k``
(unweighted, line 10), and the weighted average ``w^{t+1}`` (line 9) is fine-tuned to minimise ``MSE(f(x; w), l(x))``
on the public set (line 11) with SGD, lr 0.0005, momentum 0.9, weight decay 5e-4 (Sec. 3.5), for ``kd_epochs``
passes (0 skips it) in batches of ``kd_batch_size``, in an order fixed by the run seed.  Choice: the fine-tuning runs
in eval mode, so BatchNorm running statistics stay the clients' aggregate (the reference code fine-tunes in train
mode; here the teachers' features use running statistics too, so student and teachers compare like for like, and a
few hundred public images do not overwrite statistics learnt from all clients' data).  The extra model is built for
the call and freed at its end; its random initialisation does not consume the global random state.

**CC (Sec. 5.1, Alg. 2).**  Each round the server runs each upload in the extra model on one fixed public batch (the
first ``public_batch`` public images; Sec. 5.1: one batch of 32), L2-normalises each image's feature and
concatenates them into one vector per client (the cosine similarity of two such vectors is the mean per-image cosine
similarity of the two models), and runs **one** step of FINCH from singletons
(:func:`~privreid.federated.clustering.first_partition`).  Within each cluster ``c`` it aggregates with the method's
weighting normalised inside the cluster, ``w_c = sum_{k in c} p_k w_k / sum_{k in c} p_k`` (Alg. 2 line 12; the sums
printed over ``S_t`` can only mean the cluster, as in Fig. 3a), and each member starts its next round from ``w_c``
(line 6); a client that sits rounds out keeps the model of its last cluster, one never clustered gets the global one.

* Global model (unseen-domain evaluation, the checkpoint's ``global_state``): the paper defines none for CC ("Client
  clustering obtains multiple global models ... we focus on evaluating personalized local models").  privreid's is
  the weighted average of all uploads of the round (equally the cluster models averaged with their clusters' total
  weights) -- what FedPav (or FedPav-CDW) would have produced.  CC's headline numbers are the seen-domain evaluations
  of each client's "local model" (Sec. 4.1: trained in the client before uploading; ``keeps_trained_model``), as for
  every method of this module.
* Delivery and resumability: each member's cluster model is per-client server state
  (:class:`~privreid.federated.strategy.RoundResult`), checkpointed by the engine and transmitted by
  :meth:`ClusteredAverage.configure` at the client's next participation, so a resumed run continues exactly.  Members
  of one cluster share the same tensors: one model per cluster, not per client (in RAM and in the checkpoint).
  Limitation: upload-side beta noise (``--beta-mode upload``) noises the global state only, not the cluster models
  (download-side noise, on the model each client starts from, does apply).

Deviations from the printed algorithms: Alg. 2 line 23 returns ``w^t``, the copy saved *before* training, and line 22
stores ``v^t``; these are read as typos for the trained ``w`` and ``v`` (Alg. 3 lines 21-22, and Sec. 5.3 step 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from privreid.config import RunConfig
from privreid.device import resolve_device
from privreid.errors import ConfigError
from privreid.models import ReIDModel, build_from_config
from privreid.seeding import derive_seed
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.method_options import run_options
from privreid.federated.clustering import first_partition, groups
from privreid.federated.policy import CLASSIFIER_LOCAL, StateDict, clone_state
from privreid.federated.public_data import PublicOptions, PublicSet, load_public_set, public_batch_size
from privreid.federated.registry import Method, register
from privreid.federated.strategy import ClientServerState, RoundResult, Strategy, Upload, weighted_average
from privreid.federated.methods.fedpav import FedPavOptions, bn_buffers

#: the scalar a CDW client reports (Eq. 1)
CDW_METRIC = "cdw_distance"
#: CC's per-client server state: the client's cluster model and the members of its cluster
CC_MODEL, CC_MEMBERS = "cluster_model", "cluster_members"

@dataclass(frozen=True)
class VariantOptions(PublicOptions, FedPavOptions):
    """The options of every FedPav variant: FedPav's and the public set's."""


@dataclass(frozen=True)
class KDOptions(VariantOptions):
    """The options of the KD server step (Sec. 4.2): the public set's and the distillation's."""

    #: learning rate of the server's distillation
    kd_lr: float = 0.0005
    #: distillation epochs over the public set per round
    kd_epochs: int = 1
    #: distillation batch size
    kd_batch_size: int = 32


KD_MOMENTUM, KD_WEIGHT_DECAY = 0.9, 5e-4  # paper 004, Sec. 3.5 ("Optimizer")

Weighting = Callable[[Sequence[Upload]], list[float]]


# ----------------------------------------------------------------------------- weightings


def data_volume_weights(uploads: Sequence[Upload]) -> list[float]:
    """``n_k / n`` over the given uploads (Alg. 1 line 7)."""
    n = float(sum(u.num_samples for u in uploads))
    if n <= 0:
        raise ValueError("data-volume weights need clients with samples")
    return [u.num_samples / n for u in uploads]


def cosine_distance_weights(uploads: Sequence[Upload]) -> list[float]:
    """Eq. 2: ``p_k = d_k / sum_j d_j`` from each upload's ``cdw_distance`` metric.

    Falls back to :func:`data_volume_weights` when every distance is zero.
    """
    d = []
    for u in uploads:
        if CDW_METRIC not in u.metrics:
            raise ValueError(f"client {u.client} reported no {CDW_METRIC} (is its update the CDW probe?)")
        value = float(u.metrics[CDW_METRIC])
        if not math.isfinite(value):
            raise ValueError(f"client {u.client} reported a non-finite {CDW_METRIC}: {value}")
        d.append(max(value, 0.0))  # 1 - cos >= 0; clip rounding below zero
    total = sum(d)
    if total <= 0:
        return data_volume_weights(uploads)
    return [x / total for x in d]


# ----------------------------------------------------------------------------- CDW, client side


def cosine_distance(before: torch.Tensor, after: torch.Tensor) -> float:
    """Eq. 1 per row, ``1 - g^t . g^{t+1} / (|g^t| |g^{t+1}|)``, averaged over the batch."""
    if before.shape != after.shape or before.ndim != 2:
        raise ValueError(f"expected two (batch, dim) tensors of one shape, got {tuple(before.shape)} "
                         f"and {tuple(after.shape)}")
    cos = F.cosine_similarity(before.double(), after.double(), dim=1)
    return float((1.0 - cos).mean())


@torch.no_grad()
def probe_logits(model: ReIDModel, images: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """The logits ``(w, v)`` gives ``images`` in eval mode (footnote 4); the model's mode is restored."""
    was_training = model.training
    model.eval()
    try:
        return model.forward_train(images.to(device))[2].detach().cpu()
    finally:
        model.train(was_training)


class CosineDistanceProbe:
    """Wraps a client update: Eq. 1 between the model before and after local training.

    Paper 004 Alg. 2 / Alg. 3, client lines 15-21.  Adds ``cdw_distance`` to
    the inner update's metrics; consumes no global random state, so the
    local training is exactly the inner update's.
    """

    def __init__(self, inner: Callable[[ClientContext], dict[str, float]], public: PublicSet, batch_size: int,
                 seed: int):
        self.inner, self.public, self.batch_size, self.seed = inner, public, batch_size, seed

    def shared_batch(self, round_index: int) -> torch.Tensor:
        """``B_shared`` of a round: the same public images for every client of the round."""
        return self.public.batch(self.batch_size, derive_seed(self.seed, "cdw-batch", round_index))

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        images = self.shared_batch(ctx.round)
        before = probe_logits(ctx.model, images, ctx.device)
        metrics = dict(self.inner(ctx))
        after = probe_logits(ctx.model, images, ctx.device)
        metrics[CDW_METRIC] = cosine_distance(before, after)
        return metrics


# ----------------------------------------------------------------------------- the server's extra model


class ServerModel:
    """Builds the one extra model the server runs uploaded shared states in (KD, CC)."""

    def __init__(self, model_kwargs: dict[str, Any], device: torch.device | str = "cpu"):
        self.model_kwargs = {**model_kwargs, "num_classes": 0}
        self.device = torch.device(device)

    def build(self) -> ReIDModel:
        """A fresh model; its random initialisation leaves the global RNG untouched."""
        with torch.random.fork_rng(devices=[]):
            model = build_from_config(self.model_kwargs)
        return model.to(self.device).eval()

    @staticmethod
    def load(model: ReIDModel, state: StateDict) -> None:
        """Put a shared (classifier-free) state into ``model``; every model key must be covered."""
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"uploaded state does not fit the server model (missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]})")

    @torch.no_grad()
    def features(self, model: ReIDModel, images: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
        """Retrieval features ``(N, D)`` of ``images`` in eval mode, float32 on the CPU."""
        model.eval()
        out = [model(images[i:i + batch_size].to(self.device)).float().cpu()
               for i in range(0, len(images), batch_size)]
        return torch.cat(out)


# ----------------------------------------------------------------------------- plain weighted average


class WeightedAverage(Strategy):
    """``sum_k p_k w_k`` with the given weighting (FedPav-CDW: Eq. 2).

    ``bn_buffers``: as :class:`~privreid.federated.strategy.WeightedSum`'s.
    """

    def __init__(self, weighting: Weighting, bn_buffers: str = "average"):
        self.weighting, self.bn_buffers = weighting, bn_buffers

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        return RoundResult(weighted_average(uploads, self.weighting(uploads), self.bn_buffers))


# ----------------------------------------------------------------------------- KD


def soft_labels(server: ServerModel, model: ReIDModel, states: Sequence[StateDict], images: torch.Tensor,
                batch_size: int) -> torch.Tensor:
    """``l = (1/K) sum_k l_k``: the mean of the client models' features on ``images`` (Alg. 3 lines 7, 10)."""
    total = None
    for state in states:
        server.load(model, state)
        f = server.features(model, images, batch_size).double()
        total = f if total is None else total + f
    return (total / len(states)).float()


def distillation_loss(server: ServerModel, model: ReIDModel, images: torch.Tensor, targets: torch.Tensor,
                      batch_size: int = 64) -> float:
    """``MSE(f(x; w), l(x))`` over the whole set, eval mode (for monitoring and tests)."""
    f = server.features(model, images, batch_size)
    return float(F.mse_loss(f, targets))


def distill(server: ServerModel, model: ReIDModel, images: torch.Tensor, targets: torch.Tensor, *, lr: float,
            epochs: int, batch_size: int, order_seed: int) -> list[float]:
    """Fine-tune ``model`` in place to match ``targets`` on ``images`` (Alg. 3 line 11).

    SGD (momentum 0.9, weight decay 5e-4, Nesterov) on the MSE between the
    model's features and the soft labels; eval mode throughout (BatchNorm
    statistics frozen, see the module docstring).  Each epoch visits the
    images in a permutation seeded by ``(order_seed, epoch)``.  Returns the
    mean training loss of each epoch.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr, momentum=KD_MOMENTUM, weight_decay=KD_WEIGHT_DECAY, nesterov=True)
    model.eval()
    losses = []
    for epoch in range(epochs):
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(derive_seed(order_seed, epoch)))
        total = 0.0
        for start in range(0, len(images), batch_size):
            idx = order[start:start + batch_size]
            x, y = images[idx].to(server.device), targets[idx].to(server.device)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / len(images))
    return losses


class DistilledAverage(Strategy):
    """Weighted average, then KD on the public set (paper 004 Sec. 5.2, Alg. 3 lines 7-11).

    A pure function of the uploads and of what is fixed at construction (the
    public images, the hyper-parameters, the batch order seed).
    """

    def __init__(self, weighting: Weighting, server: ServerModel, images: torch.Tensor, *, lr: float = 0.0005,
                 epochs: int = 1, batch_size: int = 32, order_seed: int = 0, bn_buffers: str = "average"):
        self.weighting, self.server, self.images = weighting, server, images
        self.lr, self.epochs, self.batch_size, self.order_seed = lr, epochs, batch_size, order_seed
        self.bn_buffers = bn_buffers

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        average = weighted_average(uploads, self.weighting(uploads), self.bn_buffers)  # line 8-9
        if self.epochs == 0:
            return RoundResult(average)
        model = self.server.build()
        try:
            targets = soft_labels(self.server, model, [u.state for u in uploads], self.images,
                                  self.batch_size)  # lines 7, 10
            self.server.load(model, average)
            distill(self.server, model, self.images, targets, lr=self.lr, epochs=self.epochs,
                    batch_size=self.batch_size, order_seed=self.order_seed)  # line 11
            tuned = model.state_dict()
            return RoundResult(clone_state({k: tuned[k] for k in average}))
        finally:
            del model


# ----------------------------------------------------------------------------- CC


def client_signature(features: torch.Tensor) -> np.ndarray:
    """One vector per client: its per-image features L2-normalised, then concatenated.

    The cosine similarity of two signatures is the mean over images of the
    cosine similarity of the two models' features.
    """
    return F.normalize(features.double(), dim=1).reshape(-1).numpy()


class ClusteredAverage(Strategy):
    """Client clustering (paper 004 Sec. 5.1, Alg. 2 lines 8-12); global model = weighted average of all."""

    def __init__(self, weighting: Weighting, server: ServerModel, batch: torch.Tensor, bn_buffers: str = "average"):
        self.weighting, self.server, self.batch, self.bn_buffers = weighting, server, batch, bn_buffers

    def configure(self, global_state: StateDict, client, client_server_state: ClientServerState,
                  round_index: int) -> StateDict:
        """The client's cluster model (Alg. 2 line 6), or the global model before its first clustering."""
        return client_server_state.get(CC_MODEL, global_state)

    def cluster_labels(self, uploads: Sequence[Upload]) -> np.ndarray:
        """FINCH's first partition of the clients by their features on the public batch (lines 8-9)."""
        model = self.server.build()
        try:
            signatures = []
            for u in uploads:
                self.server.load(model, u.state)
                signatures.append(client_signature(self.server.features(model, self.batch)))
        finally:
            del model
        return first_partition(np.stack(signatures))

    def cluster_aggregate(self, uploads: Sequence[Upload], labels: Sequence[int]
                          ) -> tuple[StateDict, list[tuple[list[str], StateDict]]]:
        """Pure: ``(global model, [(member names, cluster model), ...])`` for given cluster labels."""
        uploads = list(uploads)
        clusters = []
        for members in groups(np.asarray(labels)):
            ups = [uploads[i] for i in members]
            clusters.append(([u.client for u in ups],
                             weighted_average(ups, self.weighting(ups), self.bn_buffers)))  # line 12
        return weighted_average(uploads, self.weighting(uploads), self.bn_buffers), clusters

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        """The global model; each member's per-client server state is its cluster's model (shared tensors)."""
        global_model, clusters = self.cluster_aggregate(uploads, self.cluster_labels(uploads))
        return RoundResult(global_model, {name: {CC_MODEL: state, CC_MEMBERS: list(members)}
                                          for members, state in clusters for name in members})


# ----------------------------------------------------------------------------- composition


def kd_settings(config: RunConfig) -> dict[str, Any]:
    """The KD server step's settings: the run's :class:`KDOptions` (typed), in range, and its order seed."""
    opts = run_options(KDOptions, config)
    for key, ok, expect in (("kd_lr", opts.kd_lr > 0, "a number > 0"), ("kd_epochs", opts.kd_epochs >= 0,
                            "an integer >= 0"), ("kd_batch_size", opts.kd_batch_size >= 1, "an integer >= 1")):
        if not ok:
            raise ConfigError(f"option {key} must be {expect}, got {getattr(opts, key)!r}")
    return {"lr": opts.kd_lr, "epochs": opts.kd_epochs, "batch_size": opts.kd_batch_size,
            "order_seed": derive_seed(config.runtime.seed, "kd-order")}


def _client_update(cdw: bool) -> Callable[[RunConfig], Callable]:
    if not cdw:
        return SupervisedUpdate

    def make(config: RunConfig) -> CosineDistanceProbe:
        return CosineDistanceProbe(SupervisedUpdate(config), load_public_set(config), public_batch_size(config),
                                   config.runtime.seed)

    return make


def _strategy(weighting: Weighting, server: str | None) -> Callable[[RunConfig, dict[str, Any]], Strategy]:
    """The method's strategy factory; KD and CC run the uploads in the clients' network, ``model_config``
    (the method the run trains, its defenses' model transforms included: GroupNorm under DP-SGD)."""
    def make(config: RunConfig, model_config: dict[str, Any]) -> Strategy:
        buffers = bn_buffers(config)
        if server is None:
            return WeightedAverage(weighting, buffers)
        public = load_public_set(config)
        server_model = ServerModel(model_config, resolve_device(config.runtime.device))
        if server == "kd":
            return DistilledAverage(weighting, server_model, public.images, **kd_settings(config),
                                    bn_buffers=buffers)
        return ClusteredAverage(weighting, server_model, public.head(public_batch_size(config)),
                                buffers)

    return make


def fedpav_variant(name: str, summary: str, *, cdw: bool, server: str | None) -> Method:
    """FedPav + CDW weighting and/or a KD or CC server step (see the module table)."""
    if server not in (None, "kd", "cc"):
        raise ValueError(f"unknown server step {server!r}")
    return Method(
        name=name,
        summary=summary,
        policy=CLASSIFIER_LOCAL,
        make_client_update=_client_update(cdw),
        make_strategy=_strategy(cosine_distance_weights if cdw else data_volume_weights, server),
        needs_per_client_uploads=True,  # CDW weights, KD soft labels and clusters read each upload
        options=KDOptions if server == "kd" else VariantOptions,
        keeps_trained_model=True,
        dp_sgd_support="yes",
    )


FEDPAV_CDW = register(fedpav_variant(
    "fedpav-cdw", "FedPav + cosine distance weight (paper 004, Eq. 1-2)", cdw=True, server=None))
FEDPAV_KD = register(fedpav_variant(
    "fedpav-kd", "FedPav + server knowledge distillation on a public set (paper 004, Sec. 5.2)", cdw=False,
    server="kd"))
FEDPAV_CC = register(fedpav_variant(
    "fedpav-cc", "FedPav + FINCH client clustering, one step per round (paper 004, Sec. 5.1)", cdw=False,
    server="cc"))
FEDPAV_CDW_KD = register(fedpav_variant(
    "fedpav-cdw-kd", "FedPav + CDW + knowledge distillation (paper 004, Alg. 3)", cdw=True, server="kd"))
FEDPAV_CDW_CC = register(fedpav_variant(
    "fedpav-cdw-cc", "FedPav + CDW + client clustering (paper 004, Alg. 2)", cdw=True, server="cc"))
