"""DPPT: L2RW+'s decentralised privacy-preserved training (Jiang et al., paper 003, Sec. III-C and III-D).

``--method dppt`` is I-DPPT (images); on a client whose samples are tracklets (``ClientData.tracklets``) the same
update trains on P x K clips of ``T`` frames, ``(B, T, 3, H, W)``, whose feature is the temporal mean of the frame
features: V-DPPT (Eq. 9, :func:`temporal_forward`).  One round (Algorithm 1):

1. Local training.  A one-stream ResNet (no modality information) on identity-based P x K batches (Sec. III-B:
   ``P = batch_size // K``, option ``instances``; the paper uses 8 x 8), with channel augmentation (option ``ca``:
   ``channel``, the Table VII ablation ``gray``, or ``none``).  Loss (Eq. 7)::

       L = L_id + L_cir + lambda * L_mrb

   ``L_id`` is the run's identity loss (cross-entropy with ``--label-smoothing``; the paper and its reference code
   use none, the ``dppt-sysu-paper`` preset sets 0) on the logits of ``z``, ``L_cir`` the circle loss
   (:func:`privreid.losses.circle_loss`, margin 0.45, gamma 64) on the retrieval feature ``z`` (the neck output the
   classifier reads), ``L_mrb`` the memory-rectification loss (Eq. 6, :func:`privreid.federated.mrb.mrb_loss`)
   towards the previous round's global centre of each sample's identity.  The client collects its L2-normalised
   ``z`` and at the end computes one top-K refined centre per identity (Eq. 3-4, ``topk`` = 4).
2. Upload: the whole model, the classifier included (Eq. 8: ``theta^l``; with ``shared_classifier=false`` the
   classifier stays local), **and the local centres**.
3. Aggregation (:class:`DPPTAggregate`): FedAvg of the model by sample count (Eq. 8,
   :class:`~privreid.federated.strategy.DataVolumeAverage`); the global memory is the per-identity mean over the
   clients holding the identity (Eq. 5, the indicator handles identity missing).
4. Download (:meth:`DPPTAggregate.configure`): the global model and the centres of the client's own identities for
   this round's ``L_mrb`` (``ClientContext.received_extra``).  In a client's first round there is no global memory
   and ``L_mrb`` is off (the reference code skips it in epoch 0).

Shared classifier (option ``shared_classifier``, default true).  L2RW+ aggregates the whole local model (Eq. 8),
and its reference code (Joey623/L2RW) trains every client with one classifier over the federation's global
identity labels (CI: the dataset's identities; EI: the union of the entities').  privreid does the same:
:func:`global_label_clients` relabels every client's training images with the global labels (the identity keys
below, in one fixed order) and the policy shares every key.  Round 1 starts all clients from the same classifier
(seeded by the run seed), which the server never needs to send.  The checkpoint's ``global_state`` holds the keys
of the classifier-free initial model, so the averaged classifier is in ``server_state`` with the class centres.
The global labels need every client's identity list in one place, so this variant does not run on Flower yet.
``shared_classifier=false`` keeps one local classifier per client over its own identities (a deviation from the
paper, listed in ``summary.json``).

Identity correspondence.  The global memory is indexed by ``(domain, domain-level train pid)`` from
``ClientData.source_pids``, so the cameras of one dataset (CI) pool their centres of the same person while
different datasets (EI) never share an identity.  This assumes sites share consistent identity labels, as a
dataset's annotations provide; a real deployment would first need a cross-site identity agreement.

Privacy (also in the method summary).  Besides weights, the server receives one centre per identity per client:
the mean of that person's embeddings at that camera, a per-person template from which the identity can be matched
or, with an inversion attack, partially reconstructed; it also learns which identities each camera saw.  Every
client downloads the centres of all identities.  The white-noise defense (``--beta``) noises the uploaded centres
on aggregation (Eq. 14 noise on the aggregate) but not the downloaded global memory (download noise applies to the
weights).  The ablations ``mrb=false`` exchange no centres.

Options (``--opt key=value``; the Table VII ablations are options):

* ``mrb`` (true), ``lambda_mrb`` (1.0, Eq. 7), ``topk`` (4, Eq. 4);
* ``circle`` (true), ``circle_margin`` (0.45), ``circle_gamma`` (64); ``L_cir`` is scaled by ``1 / batch size``,
  as the reference code does (``criterion(feat, label) / B``), keeping it at the scale of ``L_id``;
* ``ca`` (``channel``), ``ca_p`` (0.5);
* ``shared_classifier`` (true): above;
* ``instances`` (K = 8); ``seq_len`` (T = 6, HITSZ-VCM's official value; BUPTCampus uses 10): frames per
  training clip, one drawn from each of ``T`` equal chunks of the tracklet (restricted random sampling); channel
  augmentation is drawn per frame;
* ``onecycle`` (true): the learning rates follow a linear one-cycle over the whole run (Smith & Topin's OneCycle,
  as in the reference code: from ``1e-4 *`` the configured rate to it at ``peak`` = 0.32 of the run, epoch 16 of
  50, then down to 0), updated every step; it replaces the per-round step decay (``--lr-step``), which ``false``
  keeps.  The schedule spans the configured ``rounds``: ``--resume --rounds N`` changes it.  Step ``b`` of an
  epoch trains at the rate of progress ``b / n_batches``; the reference code's ``adjust_lr``
  (``CI/train.py:405-407``) reads ``lrs[batch_idx - 1]``, so its step ``b`` takes step ``b - 1``'s rate and its
  first step the epoch's last one (one step of lag, ``tests/test_reference_dppt.py``);
* ``persistent_optimizer`` (false): each client keeps its SGD momentum buffers from one of its rounds to the next,
  as the reference code's one optimiser per client (:mod:`privreid.federated.optimizer_state`);
* ``neck_bias`` (true): with ``--neck bnneck`` the bottleneck's bias trains, as in the reference code
  (``CI/model.py:39-40``: a plain ``BatchNorm1d``; the ``neck_bias`` model transform); false keeps the BNNeck's
  frozen bias.  The linear neck's bias always trains;
* ``base``: the federated algorithm DPPT is added to (Table II rows): ``fedavg`` (default), ``fedprox`` (``prox_mu``
  0.01) or ``moon`` (``moon_mu`` 1, ``moon_tau`` 0.5); these only change the local objective, the server always
  aggregates by Eq. 8.

Table VII rows: B = ``mrb=false ca=none``; B+CA = ``mrb=false``; B+gray = ``mrb=false ca=gray``; B+CA+MRB = the
defaults.  Table II's baselines "FedAvg / FedProx / MOON with L_id + L_cir" are ``base=... mrb=false ca=none``.

Deviations from the reference code (besides those in :mod:`privreid.federated.mrb` and
:class:`privreid.data.transforms.ChannelAugmentation`): its backbone pools with GeM, privreid with the average
(``--neck bnneck`` with ``neck_bias`` is its plain BatchNorm bottleneck, whose weight it initialises from
N(1, 0.01^2) where privreid uses ones).  Its bottleneck trains at the classifier's rate: ``--lr-neck`` (the
``dppt-sysu-paper`` preset sets it).

Cost: one feature copy (``D`` floats) per training image of the round is held until the centres are computed
(ResNet-50, 2048-d: 8 KB per image); the upload and the download each grow by ``classes x D`` floats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from privreid.data.torch_dataset import ImageDataset, SequenceDataset
from privreid.data.transforms import CHANNEL_AUG_MODES, build_transforms
from privreid.data.types import ClientData
from privreid.errors import ConfigError
from privreid.losses import circle_loss
from privreid.models.reid_net import is_classifier_key
from privreid.seeding import derive_seed
from privreid.federated.client import ClientContext, SupervisedUpdate, client_loader
from privreid.federated.mrb import FeatureBank, global_memory, mrb_loss
from privreid.federated.optimizer_state import load_optimizer_state, save_optimizer_state
from privreid.federated.policy import CLASSIFIER_LOCAL, ParameterPolicy, StateDict
from privreid.federated.registry import Method, register
from privreid.federated.strategy import Accumulator, DataVolumeAverage, RoundResult, Strategy, Upload, data_volume
from privreid.federated.methods.fedprox import ProximalUpdate
from privreid.federated.methods.moon import ModelContrastiveUpdate

#: prefix of the class-centre keys in uploads and in the global state
CENTRE_PREFIX = "mrb/"
#: ``ctx.received_extra`` keys: the downloaded global centres of the client's labels, and which exist
GLOBAL_CENTRES, GLOBAL_KNOWN = "mrb_global_centres", "mrb_global_known"
#: reference code: the peak of the one-cycle schedule at epoch 16 of 50
ONECYCLE_PEAK = 0.32
#: reference code: the one-cycle schedule starts at this fraction of the peak rate
ONECYCLE_START = 1e-4


#: the shared-classifier policy: every key leaves the client, the classifier included (Eq. 8)
EVERYTHING_SHARED = ParameterPolicy(is_local=lambda key: False,
                                    description="whole model shared, the global-label classifier included")


@dataclass
class GlobalLabelClient(ClientData):
    """A client whose training labels index the federation's global identity list (``shared_classifier``).

    ``identities[g]`` is the ``(domain, domain pid)`` key of global label ``g``; every client of a run holds the same
    tuple, so ``num_classes`` is the federation's identity count and every client's classifier has the same shape.
    """

    identities: tuple = ()

    @property
    def num_classes(self) -> int:
        return len(self.identities)

    def domain_pid(self, label: int) -> object:
        return self.identities[label][1]


def global_label_clients(clients: list[ClientData]) -> list[GlobalLabelClient]:
    """``clients`` with their training labels replaced by the federation's global identity labels.

    Identities are keyed by ``(domain, domain pid)`` (:meth:`ClientData.domain_pid`):
    the cameras of one dataset (CI) share them, different datasets (EI) never
    do.  Global labels number the keys in sorted order.  Images, cameras and
    test splits are unchanged.
    """
    keys = sorted({(c.domain, c.domain_pid(pid)) for c in clients for _, pid, _ in c.train}, key=repr)
    index = {key: g for g, key in enumerate(keys)}
    return [GlobalLabelClient(name=c.name, domain=c.domain, query=c.query, gallery=c.gallery, tracklets=c.tracklets,
                              train=[(path, index[(c.domain, c.domain_pid(pid))], cam) for path, pid, cam in c.train],
                              identities=tuple(keys))
            for c in clients]


def identity(client: ClientData, label: int) -> tuple[str, object]:
    """The client-independent identity of client label ``label``: ``(domain, domain pid)``."""
    if isinstance(client, GlobalLabelClient):
        return client.identities[label]
    return client.domain, client.domain_pid(label)


def identity_key(client: ClientData, label: int) -> str:
    """The key of client label ``label`` in the memory: ``mrb/<domain>/<domain pid>`` (the same in both variants)."""
    domain, pid = identity(client, label)
    return f"{CENTRE_PREFIX}{domain}/{pid}"


def is_centre(key: str) -> bool:
    return key.startswith(CENTRE_PREFIX)


def model_state(state: StateDict) -> StateDict:
    """``state`` without the class centres."""
    return {k: v for k, v in state.items() if not is_centre(k)}


def centre_state(state: StateDict) -> StateDict:
    """Only the class centres of ``state``."""
    return {k: v for k, v in state.items() if is_centre(k)}


def one_cycle_factor(progress: float, total: float, peak: float = ONECYCLE_PEAK) -> float:
    """Learning-rate multiplier after ``progress`` of ``total`` epochs: linear one-cycle.

    ``ONECYCLE_START`` at 0, 1 at ``peak * total``, 0 at ``total`` (the reference code's ``get_cyclic_lr``).
    Hand-written because ``torch.optim.lr_scheduler.OneCycleLR`` is a stateful scheduler over one optimiser's life,
    while privreid builds a fresh optimiser every round: the rate is a function of the run's global progress instead.
    """
    return float(np.interp(progress, [0.0, peak * total, total], [ONECYCLE_START, 1.0, 0.0]))


def round_start_factor(config, round_index: int) -> float | None:
    """The one-cycle multiplier at the first step of round ``round_index`` (``None`` with ``onecycle=false``)."""
    if not settings_for(config).onecycle:
        return None
    epochs = config.optim.local_epochs
    return one_cycle_factor(round_index * epochs, config.federation.rounds * epochs, settings_for(config).peak)


def temporal_forward(model, clips: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V-DPPT (Eq. 9): ``(pre_neck, z, logits)`` of clips ``(B, T, 3, H, W)``.

    Frame features are averaged over ``T`` (the neck output, which the classifier reads, and the pre-neck feature), and
    the classifier runs on the clip feature ``z``.  The paper averages "l2-normalised" frame embeddings; privreid
    averages the un-normalised ones the image path also feeds to the classifier and normalises where features are
    compared (circle loss, MRB).
    """
    b, t = clips.shape[:2]
    pre, feat, _ = model.forward_train(clips.flatten(0, 1))
    pre, z = pre.view(b, t, -1).mean(1), feat.view(b, t, -1).mean(1)
    return pre, z, model.classify(z)


@dataclass(frozen=True)
class DPPTSettings:
    """The method options, validated (see the module docstring)."""

    mrb: bool = True
    lambda_mrb: float = 1.0
    topk: int = 4
    circle: bool = True
    circle_margin: float = 0.45
    circle_gamma: float = 64.0
    ca: str = "channel"
    ca_p: float = 0.5
    shared_classifier: bool = True
    instances: int = 8
    seq_len: int = 6
    onecycle: bool = True
    peak: float = ONECYCLE_PEAK
    persistent_optimizer: bool = False
    neck_bias: bool = True
    base: str = "fedavg"
    prox_mu: float = 0.01
    moon_mu: float = 1.0
    moon_tau: float = 0.5


class DPPTLocalTraining:
    """The DPPT client update, mixed in before a :class:`SupervisedUpdate` (the base FL algorithm).

    Extra metrics: ``circle`` and ``mrb`` (mean per step where applied),
    ``mrb_steps``, ``centres`` (identities uploaded).
    """

    def __init__(self, config, settings: DPPTSettings, **base_options):
        super().__init__(config, **base_options)
        self.settings = settings
        self._bank: FeatureBank | None = None
        self._centres: torch.Tensor | None = None
        self._known: torch.Tensor | None = None
        self._sums = {"circle": 0.0, "mrb": 0.0}
        self._steps = {"circle": 0, "mrb": 0}

    def loader(self, ctx: ClientContext, epoch: int):
        """P x K batches of images, channel-augmented on the training device like every client's
        (``augment_later``: :class:`~privreid.data.ImageDataset`), or of clips of ``seq_len`` frames for a video
        client, augmented in the loader: a clip's frame draws and its augmentation's draws interleave per item, so
        moving the augmentation would change the random stream."""
        d, s = self.config.data, self.settings
        c = ctx.client
        transform = build_transforms(d.height, d.width, train=True, random_erasing=self.config.optim.random_erasing,
                                     channel_aug=s.ca, channel_aug_p=s.ca_p)
        dataset = (ImageDataset(c.train, transform, augment_later=True) if c.tracklets is None
                   else SequenceDataset(c.train, c.tracklets, transform, s.seq_len, sampling="random"))
        return client_loader(c, self.config, ctx.seed + epoch, dataset=dataset, instances=s.instances,
                             triplet_weight=ctx.triplet_weight)

    def optimizer(self, model, round_index: int):
        # one-cycle replaces the per-round step decay: the configured (round-0) rates are its peaks
        return super().optimizer(model, 0 if self.settings.onecycle else round_index)

    def restore_optimizer(self, ctx: ClientContext, opt) -> None:
        if self.settings.persistent_optimizer:
            load_optimizer_state(opt, ctx.memory)

    def keep_optimizer(self, ctx: ClientContext, opt) -> None:
        if self.settings.persistent_optimizer:
            save_optimizer_state(opt, ctx.memory)

    def forward(self, ctx: ClientContext, images: torch.Tensor):
        if images.dim() == 5:
            return temporal_forward(ctx.model, images)
        return super().forward(ctx, images)

    def schedule_step(self, ctx: ClientContext, opt, epoch: int, step: int, n_batches: int) -> None:
        if not self.settings.onecycle:
            return super().schedule_step(ctx, opt, epoch, step, n_batches)
        progress = ctx.round * self.config.optim.local_epochs + epoch + step / n_batches
        factor = one_cycle_factor(progress, self.config.federation.rounds * self.config.optim.local_epochs, self.settings.peak)
        for group in opt.param_groups:
            group.setdefault("peak_lr", group["lr"])  # the configured rate (this round's fresh optimiser)
            group["lr"] = group["peak_lr"] * factor

    def _add(self, name: str, value: torch.Tensor) -> None:
        self._sums[name] += float(value.detach())
        self._steps[name] += 1

    def extra_loss(self, ctx, pre_neck, feat, logits, labels):
        s = self.settings
        terms = [super().extra_loss(ctx, pre_neck, feat, logits, labels)]
        if s.circle:
            circle = circle_loss(feat, labels, s.circle_margin, s.circle_gamma) / len(labels)
            self._add("circle", circle)
            terms.append(circle)
        if s.mrb:
            self._bank.add(feat, labels)
            if self._centres is not None:
                loss = mrb_loss(feat, labels, self._centres, self._known)
                self._add("mrb", loss)
                terms.append(s.lambda_mrb * loss)
        terms = [term for term in terms if term is not None]
        return sum(terms) if terms else None

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        s = self.settings
        if s.shared_classifier and not any(is_classifier_key(k) for k in ctx.global_state):
            initial_classifier(ctx.model, self.config)
        self._bank = FeatureBank()
        self._sums = {"circle": 0.0, "mrb": 0.0}
        self._steps = {"circle": 0, "mrb": 0}
        if s.mrb and GLOBAL_CENTRES in ctx.received_extra:
            self._centres = ctx.received_extra[GLOBAL_CENTRES].to(ctx.device)
            self._known = ctx.received_extra[GLOBAL_KNOWN].to(ctx.device)
        try:
            metrics = super().__call__(ctx)
            centres = self._bank.centres(s.topk) if s.mrb else {}
        finally:
            self._bank = self._centres = self._known = None
        ctx.upload_extra.update({identity_key(ctx.client, label): c.to("cpu") for label, c in centres.items()})
        metrics.update({name: self._sums[name] / max(self._steps[name], 1) for name in self._sums})
        metrics.update(mrb_steps=float(self._steps["mrb"]), centres=float(len(centres)))
        return metrics


def initial_classifier(model, config) -> None:
    """Give ``model`` the run's initial global classifier (round 1 of ``shared_classifier``).

    A fresh head of the model's size drawn from a seed of the run alone, so every client starts from the same
    classifier, as from the rest of the initial global model; the global random state is left untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(config.runtime.seed, "dppt-initial-classifier"))
        model.reset_classifier(model.num_classes)


class DPPTUpdate(DPPTLocalTraining, SupervisedUpdate):
    """DPPT on FedAvg (the paper's default)."""


class DPPTProxUpdate(DPPTLocalTraining, ProximalUpdate):
    """DPPT on FedProx: the local objective also has ``(mu/2)||w - w_global||^2`` (Table II, FedProx + I-DPPT)."""


class DPPTMoonUpdate(DPPTLocalTraining, ModelContrastiveUpdate):
    """DPPT on MOON: the local objective also has MOON's model-contrastive term (Table II, Moon + I-DPPT)."""

    def forward(self, ctx: ClientContext, images: torch.Tensor):
        if images.dim() == 5:
            raise ConfigError("dppt with base=moon does not support clip (video) input: MOON's reference "
                              "features are computed per image")
        return super().forward(ctx, images)


class DPPTAggregate(Strategy):
    """Eq. 8 for the model (data-volume average), Eq. 5 for the class centres (indicator-masked mean).

    Streams the model: each upload's model keys are folded into a running data-volume sum as it arrives; only its
    class centres (one feature vector per identity) are kept until the round's end.
    """

    def upload_weight(self) -> Callable[[Upload], float]:
        """Eq. 8's weight of an upload, its data volume (what secure aggregation pre-scales the model by)."""
        return data_volume

    def accumulator(self, global_state: StateDict) -> Accumulator:
        return _DPPTSum(model_state(global_state), centre_state(global_state))

    def configure(self, global_state: StateDict, client: ClientData, client_server_state,
                  round_index: int) -> StateDict:
        """The model and the global memory of the client's identities (step 4, module docstring).

        ``GLOBAL_CENTRES``: one centre per client label (zeros where the federation has none yet), ``GLOBAL_KNOWN``:
        which exist; both absent while no identity of the client has a global centre.
        """
        received = model_state(global_state)
        centres = [global_state.get(identity_key(client, label)) for label in range(client.num_classes)]
        present = [c for c in centres if c is not None]
        if present:
            zero = torch.zeros_like(present[0])
            received[GLOBAL_CENTRES] = torch.stack([zero if c is None else c for c in centres])
            received[GLOBAL_KNOWN] = torch.tensor([c is not None for c in centres])
        return received


class _DPPTSum(Accumulator):
    def __init__(self, model_global: StateDict, previous_centres: StateDict):
        self.model = DataVolumeAverage().accumulator(model_global)
        self.previous, self.centres = previous_centres, []

    def add(self, upload: Upload) -> None:
        self.model.add(dataclasses.replace(upload, state=model_state(upload.state)))
        self.centres.append(centre_state(upload.state))

    def result(self) -> RoundResult:
        return RoundResult({**self.model.mean(), **global_memory(self.centres, previous=self.previous)})


BASES = ("fedavg", "fedprox", "moon")


#: option -> (valid range of its typed value, what the error says it must be)
RANGES = {
    "lambda_mrb": (lambda v: v >= 0, "a number >= 0"),
    "topk": (lambda v: v >= 1, "an integer >= 1"),
    "circle_margin": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "circle_gamma": (lambda v: v > 0, "a number > 0"),
    "ca": (lambda v: v in CHANNEL_AUG_MODES, f"one of {', '.join(CHANNEL_AUG_MODES)}"),
    "ca_p": (lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
    "instances": (lambda v: v >= 1, "an integer >= 1"),
    "seq_len": (lambda v: v >= 1, "an integer >= 1"),
    "peak": (lambda v: 0 < v < 1, "a number in (0, 1)"),
    "base": (lambda v: v in BASES, f"one of {', '.join(BASES)}"),
    "prox_mu": (lambda v: v >= 0, "a number >= 0"),
    "moon_mu": (lambda v: v >= 0, "a number >= 0"),
    "moon_tau": (lambda v: v > 0, "a number > 0"),
}


def settings_for(config) -> DPPTSettings:
    """The method options of ``config``, typed (:meth:`Method.settings`) and in range; else :class:`ConfigError`."""
    settings = DPPT.settings(config)
    for key, (valid, expect) in RANGES.items():
        value = getattr(settings, key)
        if not valid(value):
            raise ConfigError(f"dppt option {key} must be {expect}, got {value!r}")
    return settings


def model_transforms(config) -> list[str]:
    """``neck_bias`` where the run's neck is the BNNeck and the option is on (module docstring)."""
    return ["neck_bias"] if config.model.neck == "bnneck" and settings_for(config).neck_bias else []


def make_client_update(config) -> DPPTLocalTraining:
    s = settings_for(config)
    if s.base == "fedprox":
        return DPPTProxUpdate(config, s, mu=s.prox_mu)
    if s.base == "moon":
        return DPPTMoonUpdate(config, s, mu=s.moon_mu, tau=s.moon_tau)
    return DPPTUpdate(config, s)


DPPT = register(
    Method(
        name="dppt",
        dp_sgd_support="no (it draws its own batches and uploads class centres DP-SGD does not privatise)",
        summary="I-DPPT / V-DPPT (L2RW+, paper 003): id + circle loss, channel augmentation, memory rectification "
                "bank, FedAvg of the whole model (one classifier over the global identity labels); clients also "
                "upload per-identity feature centres (a per-person template)",
        policy=lambda config: EVERYTHING_SHARED if settings_for(config).shared_classifier else CLASSIFIER_LOCAL,
        make_client_update=make_client_update,
        make_strategy=lambda config, model_config: DPPTAggregate(),
        needs_per_client_uploads=False,
        exchanges_extras=lambda config: settings_for(config).mrb,  # the class centres (Eq. 3-5)
        make_prepare_clients=lambda config: global_label_clients if settings_for(config).shared_classifier else None,
        global_eval_state=lambda global_state, client_states: model_state(global_state),
        options=DPPTSettings,
        model_transforms=model_transforms,
        lr_factor=round_start_factor,
    )
)
