"""SKA: Selective Knowledge Aggregation (Wu & Gong, paper 000).

Three components, each switchable for the Table 4 / 5 ablations with ``--opt an=false``, ``--opt lsn=false``,
``--opt dual=false`` (all default true; ``--opt weighting=volume`` for the rows that equal Table 2's baselines, see
"Ablations"):

* **Head** (Sec. 4.2: "two fully-connected layers ... for classification"): the identity classifier is the authors'
  2-FC mapping network (FC -> BN -> LeakyReLU(0.1) -> Dropout -> FC, SunTongtongtong/FedReid ``lib/model.py``,
  ``MLP``; model transform ``mlp_head``), local like every classifier and reading the pooled trunk feature, which is
  also the retrieval feature with ``--neck none`` (the paper preset; the reference's ``embedding_net_test``).
  ``--opt head=linear`` is the base model's linear classifier.
* **AN** (Sec. 3.2, Eq. 2): the second BatchNorm of every residual block is attentive normalisation
  (:class:`privreid.models.attentive_norm.AttentiveNorm2d`), model transform ``attentive_norm``.
* **LSN** (Sec. 3.2): local-specific normalisation.  Every normalisation layer of the trunk and neck (BN and AN:
  affine / mixture parameters, AN's attention FC, running statistics) stays on the client with the identity
  classifier; the key rule is FedBN's (:func:`.fedbn.is_norm_key`).
* **Dual** (Sec. 3.3, Algorithm 1): each client also trains a *local generalised* model (LG) of the same
  architecture next to its *local specific* model (LS), both with the identity loss on the same batches.

How Algorithm 1 maps onto privreid's engine (one resident model per client):

* The resident model is LS.  Its model transform ``dual_norm`` adds ``general_norms.*``: a second copy of every norm
  layer, unused by ``forward``, holding **LG's norm layers**.  The policy keeps LS's norm keys and the classifier
  local and shares the rest: LS's non-norm layers plus LG's norm layers.  So the upload *is*
  ``SelectAgg(w_ls, w_lg)`` (Alg. 1 lines 17-23: norm layers from LG, the rest from LS).
* Server (line 6): the uniform mean ``1/K sum_k w_l^k`` (:class:`~..strategy.UniformAverage`);
  ``--opt weighting=volume`` uses FedAvg's ``n_k / n`` instead ("Ablations").
* Download (``SelectUpdate``, lines 25-31): the engine loads the global state plus the client's local keys: LS gets
  every non-norm layer from the global model and keeps its own norms; LG's norms (``general_norms.*``) get the global
  norms.  LG's non-norm layers are a fresh copy of the global ones every round (``w_lg <- w_{t+1}``), trained with
  :func:`torch.func.functional_call` on the resident module with LG's tensors swapped in (LG's norm tensors *are* the
  resident ``general_norms`` parameters and buffers, so their gradients and running statistics land there).  After
  local training LG's non-norm layers are dropped: SelectAgg never uses them and SelectUpdate overwrites them.  LG has
  its own identity classifier (local, kept in the client's memory, never uploaded; ``w_{t+1}`` has none).
* Local objective: ``CE(LS) + CE(LG)`` on each batch.  The two parameter sets are disjoint, so this is Alg. 1 lines
  13-14 run simultaneously (plus the triplet term on LS with ``--triplet-weight``).  Both identity losses use
  ``--label-smoothing`` (the paper does not mention smoothing: 0).

Evaluation (Sec. 3.1, 4.1):

* Global model, for unseen domains (:func:`global_eval_state`): the aggregated non-norm layers with the aggregated
  *generalised* norm layers (``general_norms.*`` copied onto the forward norm keys).  Without Dual ("Baseline+LSN(+AN)",
  Table 4 note) it is FedBN's construct: the average of the clients' local-specific norm layers at the end of
  training.  Without LSN the global state already holds every layer.
* Personalised model for seen domain ``k``: the LS model Algorithm 1 returns (line 8), after SelectUpdate (line 7):
  the aggregated non-norm layers + client ``k``'s own local-specific norm layers (+ its classifier, unused for
  retrieval); the engine's default personalisation (``keeps_trained_model=False``).  Without LSN it is the global
  model, so "Baseline" rows score FedAvg+D's global model on seen domains.  LG's norm layers are not part of it
  (Table 4's note: Dual does not affect personalisation).

Uploads per round: the shared non-norm layers plus one set of norm layers, the size of FedPav's; ``dual`` costs
about twice FedPav's local compute.

Ablations.  ``an``, ``lsn``, ``dual`` (Table 4) change the policy and the model, so both are functions of the run
configuration (:func:`policy_for`, :func:`model_transforms_for`).  Table 4's "Baseline" and "Baseline+LSN" rows carry
exactly the numbers of Table 2's FedAvg+D and FedBN+D, which weight by data volume, while Algorithm 1 (line 6)
averages uniformly.  ``--opt weighting=volume`` makes the ablations coincide with those baselines: ``ska --opt
an=false --opt lsn=false --opt dual=false --opt weighting=volume --opt head=linear`` is ``fedavg`` (same model,
policy, strategy and personalised model) and ``--opt an=false --opt dual=false --opt weighting=volume --opt
head=linear`` is ``fedbn`` (its global model too).  The default stays Algorithm 1's uniform mean; the two differ only
with unequal client sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from privreid.errors import ConfigError
from privreid.models.reid_net import CLASSIFIER_PREFIX, is_classifier_key
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL, ParameterPolicy, StateDict
from privreid.federated.registry import Method, register
from privreid.federated.strategy import DataVolumeAverage, Strategy, UniformAverage
from privreid.federated.methods.fedbn import global_eval_state as fedbn_global_eval_state
from privreid.federated.methods.fedbn import is_norm_key
from privreid.federated.methods.fedreid import WU_GONG_SLOPE, mapping_head

GENERAL_PREFIX = "general_norms."
LG_HEAD_MEMORY = "lg_classifier/"


# --------------------------------------------------------------------------- options
@dataclass(frozen=True)
class SKAOptions:
    """SKA's method options (``--opt key=value``; the Table 4 ablations switch a component off)."""

    #: attentive normalisation in each block's second norm layer (Sec. 3.2, Eq. 2)
    an: bool = True
    #: local-specific norm layers (Sec. 3.2)
    lsn: bool = True
    #: the dual local-generalised model (Sec. 3.3, Algorithm 1)
    dual: bool = True
    #: the server's average: ``uniform`` (Alg. 1 line 6) or ``volume`` (FedAvg's data-volume weights)
    weighting: str = "uniform"
    #: the identity classifier: ``mlp`` (the 2-FC mapping network, Sec. 4.2) or ``linear``
    head: str = "mlp"

    @property
    def dual_active(self) -> bool:
        """Dual only exists on top of LSN: without local norms LS and LG share every layer."""
        return self.dual and self.lsn


#: ``--opt head=...``: the model transforms of each identity classifier
HEADS = {"mlp": [mapping_head(WU_GONG_SLOPE)], "linear": []}


def options_from_config(config) -> SKAOptions:
    """The run's SKA options (:meth:`Method.settings`); the policy and model depend on an / lsn / dual / head only."""
    opts = SKAOptions(**{k: SKA.option(config, k) for k in ("an", "lsn", "dual", "head")})
    if opts.head not in HEADS:
        raise ConfigError(f"ska option head must be one of {', '.join(HEADS)}, got {opts.head!r}")
    return opts


#: ``--opt weighting=...``: the server's average (Alg. 1 line 6 is ``uniform``)
WEIGHTINGS = {"uniform": UniformAverage, "volume": DataVolumeAverage}


def make_strategy(config, model_config) -> Strategy:
    """Alg. 1 line 6: the uniform mean, or FedAvg's data-volume average (``weighting=volume``)."""
    weighting = SKA.option(config, "weighting")
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"ska option weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    return WEIGHTINGS[weighting]()


# --------------------------------------------------------------------------- keys
def is_local_norm_key(key: str) -> bool:
    """A forward (local-specific) norm key of the trunk or neck; not LG's copies, not the classifier's."""
    return is_norm_key(key) and not key.startswith((GENERAL_PREFIX, CLASSIFIER_PREFIX))


def general_key(key: str, norm_modules: list[str]) -> str:
    """``backbone.layer1.0.bn2.attention.weight`` -> ``general_norms.backbone__layer1__0__bn2.attention.weight``."""
    for name in norm_modules:
        if key.startswith(name + "."):
            return GENERAL_PREFIX + name.replace(".", "__") + key[len(name):]
    raise KeyError(f"{key} belongs to no normalisation layer")


def forward_key(gkey: str) -> str:
    """Inverse of :func:`general_key`."""
    if not gkey.startswith(GENERAL_PREFIX):
        raise KeyError(f"{gkey} is not a generalised-norm key")
    module, _, leaf = gkey[len(GENERAL_PREFIX):].partition(".")
    return f"{module.replace('__', '.')}.{leaf}"


def policy_for(opts: SKAOptions) -> ParameterPolicy:
    """LSN: classifier + local-specific norms local; else only the classifier."""
    if not opts.lsn:
        return CLASSIFIER_LOCAL
    return ParameterPolicy(is_local=lambda k: is_classifier_key(k) or is_local_norm_key(k),
                           description="classifier and local-specific norm layers (BN and AN) local; "
                                       "non-norm layers and the generalised norm layers shared")


def model_transforms_for(opts: SKAOptions) -> list:
    """The head (Sec. 4.2: ``mlp_head``), AN (Sec. 3.2, Eq. 2: ``attentive_norm``), Dual (Sec. 3.3: ``dual_norm``)."""
    return [*HEADS[opts.head],
            *(name for name, on in (("attentive_norm", opts.an), ("dual_norm", opts.dual_active)) if on)]


# --------------------------------------------------------------------------- Algorithm 1, pure
def select_agg(ls_state: StateDict, lg_state: StateDict, is_norm=is_local_norm_key) -> StateDict:
    """Alg. 1 lines 17-23: norm layers from the local generalised model, every other layer from the local specific one."""
    return {p: (lg_state[p] if is_norm(p) else ls_state[p]) for p in ls_state}


def select_update(global_state: StateDict, ls_state: StateDict,
                  is_norm=is_local_norm_key) -> tuple[StateDict, StateDict]:
    """Alg. 1 lines 25-31 for one client: ``(new w_ls, new w_lg)``.

    LG takes the whole global model; LS takes its non-norm layers and keeps its own norm layers.
    """
    lg = dict(global_state)
    ls = dict(ls_state)
    for p, v in global_state.items():
        if not is_norm(p):
            ls[p] = v
    return ls, lg


# --------------------------------------------------------------------------- global model
def global_eval_state(global_state: StateDict, client_states: dict[str, StateDict]) -> StateDict:
    """The global generalised model (see the module docstring)."""
    general = [k for k in global_state if k.startswith(GENERAL_PREFIX)]
    if general:  # Dual: aggregated generalised norms onto the forward norm keys
        out = dict(global_state)
        out.update({forward_key(k): global_state[k] for k in general})
        return out
    norms = {name: {k: v for k, v in s.items() if is_local_norm_key(k)} for name, s in client_states.items()}
    if not any(norms.values()):  # no LSN: the global state is complete
        return dict(global_state)
    return fedbn_global_eval_state(global_state, norms)  # LSN without Dual: mean of local norms


# --------------------------------------------------------------------------- client
class SKAUpdate(SupervisedUpdate):
    """LS training (SupervisedUpdate) plus, with Dual, the local generalised model on the same batches."""

    def __init__(self, config, opts: SKAOptions):
        super().__init__(config)
        self.opts = opts

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        model = ctx.model
        if not self.opts.dual_active:
            return super().__call__(ctx)
        if not model.has_transform("dual_norm"):
            raise ConfigError("ska with dual=true needs a model with the dual_norm transform")
        norm_modules = [name.replace("__", ".") for name in model.general_norms.keys()]
        params = dict(model.named_parameters())
        resident = dict(model.named_parameters())
        resident.update(dict(model.named_buffers()))
        lg: dict[str, torch.Tensor] = {}
        for key in model.state_dict():
            if key.startswith((CLASSIFIER_PREFIX, GENERAL_PREFIX)):
                continue
            if is_local_norm_key(key):  # LG's norm = the resident general copy (grads, running stats land there)
                lg[key] = resident[general_key(key, norm_modules)]
            else:  # SelectUpdate: w_lg <- w_{t+1}
                src = ctx.global_state[key].detach().clone().to(ctx.device)
                lg[key] = src.requires_grad_(key in params and params[key].requires_grad)
        self.lg_state = lg
        self.lg_copies = [v for k, v in lg.items() if not is_local_norm_key(k) and v.requires_grad]
        self.lg_head = self._lg_head(ctx)
        try:
            metrics = super().__call__(ctx)
        finally:
            head = self.lg_head
            del self.lg_state, self.lg_copies, self.lg_head
        for k in [k for k in ctx.memory if k.startswith(LG_HEAD_MEMORY)]:
            del ctx.memory[k]
        for k, v in head.state_dict().items():
            ctx.memory[LG_HEAD_MEMORY + k] = v.detach().to("cpu", copy=True)
        return metrics

    @staticmethod
    def _lg_head(ctx: ClientContext) -> nn.Module:
        model = ctx.model
        head = model.new_head(ctx.client.num_classes)
        saved = {k[len(LG_HEAD_MEMORY):]: v for k, v in ctx.memory.items() if k.startswith(LG_HEAD_MEMORY)}
        if saved:
            head.load_state_dict(saved)
        return head.to(ctx.device).train()

    def optimizer(self, model, round_index):
        opt = super().optimizer(model, round_index)
        if hasattr(self, "lg_state"):
            body_lr, head_lr = opt.param_groups[0]["lr"], opt.param_groups[1]["lr"]
            # LG's own copies of the non-norm layers; its norm layers (general_norms) are already
            # in the body group as parameters of the resident model
            opt.add_param_group({"params": self.lg_copies, "lr": body_lr})
            opt.add_param_group({"params": list(self.lg_head.parameters()), "lr": head_lr})
        return opt

    def extra_loss(self, ctx, pre_neck, feat, logits, labels):
        if not hasattr(self, "lg_state"):
            return None
        lg_feat = functional_call(ctx.model, self.lg_state, (ctx.images,), strict=False)
        return self.criterion(self.lg_head(lg_feat), labels)


# --------------------------------------------------------------------------- registration
SKA = register(
    Method(
        name="ska",
        dp_sgd_support="yes (with --opt an=false dual=false: attentive normalisation uses batch statistics)",
        summary="SKA (Wu & Gong): attentive norm, local-specific norms, dual local-generalised norms (paper 000)",
        policy=lambda config: policy_for(options_from_config(config)),
        make_client_update=lambda config: SKAUpdate(config, options_from_config(config)),
        make_strategy=make_strategy,
        needs_per_client_uploads=False,
        global_eval_state=global_eval_state,
        options=SKAOptions,
        model_transforms=lambda config: model_transforms_for(options_from_config(config)),
    )
)
