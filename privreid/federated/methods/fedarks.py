"""FedARKS (Xu et al., *Federated Aggregation via Robust and Discriminative
Knowledge Selection and Integration for Person Re-ID*, paper 001).

RK, robust knowledge (client side)
    Each client model has a second, body-part branch (model transform ``part_branch``,
    :class:`privreid.models.part_branch.PartBranch`): three horizontal bands of the ``layer4`` map, head / torso /
    legs, at the fixed fractions :data:`privreid.models.part_branch.PART_BANDS` of the map height, ``(0, .25), (.25,
    .55), (.55, 1)``.  Deviation: the paper cuts the parts with PifPaf keypoints; no pose model is available offline,
    and dataset-provided keypoints / part boxes are not supported yet.  The part feature is fused with the global
    (neck) feature, ``theta = v * global + (1 - v) * part`` with ``v = 0.5`` (Eq. 1, option ``v``, stored as the
    buffer ``part.fusion_weight``).  The local objective (Eq. 2) is cross-entropy on ``classifier(theta)`` (with
    ``--label-smoothing``; the paper's is plain, 0) plus the batch-hard triplet loss on theta, with PK sampling: the
    method's default ``--triplet-weight`` is 1; ``--triplet-weight 0`` drops the term (a deviation, listed in
    ``summary.json``; the metrics say ``triplet_on``).  The part branch (``part.*``) and the classifier stay on the
    client (policy); the part branch trains at the head learning rate, being freshly initialised like the classifier.

    Evaluation.  A client's personalised model (``load_model(ckpt, client=...)``, the engine's "local" evaluation)
    retrieves with the fused theta.  The global model never sees any part branch (the server holds only the global
    branch, as in the paper): for seen and unseen domains it retrieves with the global feature alone, the
    checkpoint's ``global_eval_extra`` carrying a neutral part branch with ``part.fusion_weight = 1`` (zero weights,
    never run).

KS, knowledge selection (server side, Eq. 3-7)
    ``R_k = ||theta_g^t - theta_g^(t-1)|| / ||theta_k^(t+dt) - theta_k^t||`` (Eq. 3) over the shared trainable
    parameters (BN running statistics excluded; the part branch and classifier are not in the global branch).  As in
    Algorithm 1 (lines 13-14) the client computes ``R_k`` and uploads it as a scalar metric with its update norm; the
    strategy (:class:`KnowledgeSelection`) is then a pure function of the uploads: ``w_k = exp(-beta |1 - R~_k|)``
    (Eq. 4, ``beta = 5``), ``w_k = 0`` when the update norm ``< epsilon = 1e-8`` (Eq. 7; Algorithm 1 line 18 gates on
    ``R_k > epsilon`` instead, privreid follows Eq. 7), normalised, and ``theta_g^(t+1) = sum_k alpha_k theta_k``
    (Eq. 5).

    Smoothing (Eq. 6) ``R~_k^t = gamma R_k^t + (1 - gamma) R~_k^(t-1)``, ``gamma = 0.7``, is fed into Eq. 4 (the paper
    smooths "to prevent the aggregated weights from drastic changes between rounds").  The numerator needs the
    previous global model and Eq. 6 the previous smoothed ratio, state across rounds a pure strategy cannot keep: both
    live in the client's memory (``ctx.memory``: ``ks/prev_global/<key>``, the global trainable parameters the client
    last received, and ``ks/smoothed_ratio``), which the engine checkpoints, so ``--resume`` continues exactly.
    Consequences: the client memory holds one copy of the shared parameters (as FedReID's); with ``C < 1`` a client's
    "previous global" is the one it last received, so its ratio spans the rounds since it last took part.  On a
    client's first participation there is no ratio (``ks_has_ratio = 0``); such a client gets the mean weight of the
    clients that have one (all equal when none has: round 1 is a uniform average).  ``R~`` starts at the first ratio.
    A gated client (update norm ``< epsilon``) keeps its previous ``R~``.  If every client is gated the global state
    is kept.  The ratio uses ``theta_k^t``, what the client received after download defenses, so it stays correct
    when noise is added to the download.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from dataclasses import dataclass

from privreid.errors import ConfigError
from privreid.models.reid_net import CLASSIFIER_PREFIX
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.lr_schedule import lr_factor
from privreid.federated.policy import StateDict, local_prefixes
from privreid.federated.registry import Method, register
from privreid.federated.strategy import RoundResult, Strategy, Upload, weighted_average

PART_PREFIX = "part."
PREV_GLOBAL = "ks/prev_global/"
SMOOTHED = "ks/smoothed_ratio"

#: metric names of the KS scalars in an upload
RATIO, HAS_RATIO, UPDATE_NORM = "ks_ratio", "ks_has_ratio", "ks_update_norm"

POLICY = local_prefixes(CLASSIFIER_PREFIX, PART_PREFIX,
                        description="classifier and body-part branch local, global branch shared")


# --------------------------------------------------------------------------- KS maths (pure)
def l2_distance(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], keys: Sequence[str]) -> float:
    """``||a - b||_2`` over ``keys``, flattened and concatenated (float64)."""
    total = 0.0
    for k in keys:
        total += float((a[k].double() - b[k].double().to(a[k].device)).pow(2).sum())
    return math.sqrt(total)


def direction_ratio(global_now: Mapping[str, torch.Tensor], global_prev: Mapping[str, torch.Tensor],
                    local_after: Mapping[str, torch.Tensor], keys: Sequence[str],
                    epsilon: float = 1e-8) -> tuple[float | None, float]:
    """Eq. 3: ``(R_k, ||theta_k^(t+dt) - theta_k^t||)``.

    ``global_now`` is theta_k^t (the received global), ``global_prev`` the
    previous global (``None`` on a first participation) and ``local_after``
    theta_k^(t+dt).  ``R_k`` is ``None`` when there is no previous global or
    the update norm is below ``epsilon`` (Eq. 7's gate).
    """
    update_norm = l2_distance(local_after, global_now, keys)
    if global_prev is None or update_norm < epsilon:
        return None, update_norm
    return l2_distance(global_now, global_prev, keys) / update_norm, update_norm


def smooth_ratio(ratio: float, previous: float | None, gamma: float = 0.7) -> float:
    """Eq. 6: ``gamma R + (1 - gamma) R~_prev`` (``R`` itself when there is no history)."""
    return ratio if previous is None else gamma * ratio + (1.0 - gamma) * previous


def ks_weights(ratios: Sequence[float | None], update_norms: Sequence[float], beta: float = 5.0,
               epsilon: float = 1e-8) -> list[float]:
    """Eq. 4 + 7: normalised ``alpha_k``; ``ratios`` are the (smoothed) ``R~_k``.

    ``None`` (no ratio yet) gets the mean unnormalised weight of the clients
    with a ratio (1 if none has); update norms below ``epsilon`` get 0.  All
    zero when every client is gated.
    """
    raw = [None if r is None else math.exp(-beta * abs(1.0 - r)) for r in ratios]
    known = [w for w in raw if w is not None]
    fill = sum(known) / len(known) if known else 1.0
    w = [0.0 if n < epsilon else (fill if x is None else x) for x, n in zip(raw, update_norms)]
    total = sum(w)
    return [x / total for x in w] if total > 0 else [0.0] * len(w)


class KnowledgeSelection(Strategy):
    """FedARKS' KS aggregation (Eq. 4, 5, 7) from the KS scalars each upload carries."""

    def __init__(self, beta: float = 5.0, epsilon: float = 1e-8):
        self.beta, self.epsilon = float(beta), float(epsilon)

    def weights(self, uploads: list[Upload]) -> list[float]:
        for u in uploads:
            if UPDATE_NORM not in u.metrics:
                raise ValueError(f"client {u.client} sent no {UPDATE_NORM!r}: KS needs the FedARKS client update")
        ratios = [u.metrics[RATIO] if u.metrics.get(HAS_RATIO, 0.0) > 0 else None for u in uploads]
        return ks_weights(ratios, [u.metrics[UPDATE_NORM] for u in uploads], self.beta, self.epsilon)

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        alpha = self.weights(uploads)
        if sum(alpha) <= 0:  # every client gated: nothing moved meaningfully
            return RoundResult(dict(global_state))
        return RoundResult(weighted_average(uploads, alpha))


# --------------------------------------------------------------------------- client update (RK + R_k)
class FedARKSUpdate(SupervisedUpdate):
    """Dual-branch local training (Eq. 1-2) followed by the client's R_k (Eq. 3, 6)."""

    def __init__(self, config):
        super().__init__(config)
        self.v = _option(config, "v", 0.0, 1.0)
        self.gamma = _option(config, "gamma", 0.0, 1.0)
        self.epsilon = _option(config, "epsilon", 0.0, math.inf)

    def optimizer(self, model, round_index):
        """Part branch at the head learning rate (fresh layers, like the classifier)."""
        opt = super().optimizer(model, round_index)
        part_ids = {id(p) for p in model.part.parameters()}
        body = opt.param_groups[0]
        body["params"] = [p for p in body["params"] if id(p) not in part_ids]
        opt.add_param_group({"params": list(model.part.parameters()),
                             "lr": self.config.optim.lr_head * lr_factor(self.config, round_index)})
        return opt

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        model = ctx.model
        if getattr(model, "part", None) is None:
            raise ConfigError("fedarks needs a model with the part_branch transform")
        model.part.fusion_weight.fill_(self.v)
        keys = [k for k, p in model.named_parameters() if not POLICY.is_local(k)]
        params = dict(model.named_parameters())
        start = {k: params[k].detach().to("cpu", copy=True) for k in keys}  # theta_k^t
        metrics = super().__call__(ctx)
        after = {k: params[k].detach().to("cpu") for k in keys}  # theta_k^(t+dt)
        prev = {k[len(PREV_GLOBAL):]: v for k, v in ctx.memory.items() if k.startswith(PREV_GLOBAL)}
        ratio, update_norm = direction_ratio(start, prev if set(prev) == set(keys) else None, after, keys,
                                             self.epsilon)
        previous = float(ctx.memory[SMOOTHED]) if SMOOTHED in ctx.memory else None
        smoothed = previous if ratio is None else smooth_ratio(ratio, previous, self.gamma)
        for k in keys:
            ctx.memory[PREV_GLOBAL + k] = start[k]
        if smoothed is not None:
            ctx.memory[SMOOTHED] = torch.tensor(smoothed, dtype=torch.float64)
        metrics.update({RATIO: float(smoothed) if smoothed is not None else 1.0,
                        HAS_RATIO: float(smoothed is not None), UPDATE_NORM: float(update_norm),
                        "ks_raw_ratio": float(ratio) if ratio is not None else -1.0,
                        "triplet_on": float(ctx.triplet_weight > 0)})
        return metrics


def global_eval_state(global_state: StateDict, client_states: dict[str, StateDict]) -> StateDict:
    """The global model: global branch only (a neutral part branch with ``fusion_weight = 1``)."""
    template = next((s for s in client_states.values() if any(k.startswith(PART_PREFIX) for k in s)), None)
    if template is None:
        return dict(global_state)
    part = {k: torch.zeros_like(v) for k, v in template.items() if k.startswith(PART_PREFIX)}
    part[PART_PREFIX + "fusion_weight"] = torch.tensor(1.0)
    return {**global_state, **part}


@dataclass(frozen=True)
class FedARKSOptions:
    """FedARKS's method options (paper 001)."""

    #: fusion weight v of the global and the part-based model (Eq. 1)
    v: float = 0.5
    #: sharpness beta of the knowledge-selection weights (Eq. 4)
    beta: float = 5.0
    #: gamma of Eq. 6
    gamma: float = 0.7
    #: epsilon of the knowledge-selection weights (numerical guard)
    epsilon: float = 1e-8


def _option(config, name: str, lo: float, hi: float) -> float:
    """Option ``name`` (a float, typed by :class:`FedARKSOptions`) checked to lie in ``[lo, hi]``."""
    value = FEDARKS.option(config, name)
    if not lo <= value <= hi:
        raise ConfigError(f"fedarks option {name} must lie in [{lo}, {hi}], got {value}")
    return value


def _make_strategy(config, model_config) -> KnowledgeSelection:
    return KnowledgeSelection(beta=_option(config, "beta", 0.0, math.inf),
                              epsilon=_option(config, "epsilon", 0.0, math.inf))


FEDARKS = register(
    Method(
        name="fedarks",
        dp_sgd_support="yes (with --triplet-weight 0)",
        summary="FedARKS: local body-part branch fused with the global feature (RK), "
                "direction-consistency aggregation weights (KS) (paper 001)",
        policy=POLICY,
        make_client_update=FedARKSUpdate,
        make_strategy=_make_strategy,
        needs_per_client_uploads=True,
        global_eval_state=global_eval_state,
        options=FedARKSOptions,
        model_transforms=("part_branch",),
        triplet_weight=1.0,
    )
)
