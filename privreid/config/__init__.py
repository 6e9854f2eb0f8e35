"""Run configuration.

One :class:`RunConfig` describes a training run completely: data, partition protocol, model, method and
hyper-parameters.  It is plain data (dataclasses of primitives), saved inside every checkpoint with
``torch.load(weights_only=True)``-safe types, so a run can be rebuilt from its checkpoint alone.

Defaults follow FedPav (Zhuang et al., paper 004, Sec. 3.5): SGD with momentum 0.9 and weight decay 5e-4, batch 32,
one local epoch, learning rate 0.05 for the identity classifier and 0.005 for the backbone, step decay gamma 0.1 every
40 rounds.  The paper starts from ImageNet weights; training from scratch (the only option offline) needs a larger
backbone learning rate, which the demo passes explicitly.

Recipe defaults that are not the papers' (each paper's preset in ``configs/`` sets the paper's value, and
:mod:`privreid.deviations` lists the active ones in every ``summary.json``): label smoothing 0.1 (all five papers use
plain cross-entropy), random erasing 0.5, last stride 1, no dropout before the classifier, and the neck trained at the
backbone's learning rate.

``None`` in a field means "not given": a documented default applies (:func:`lr_neck`, :func:`dp_delta`, ...).

The dataclasses hold the only defaults.  The CLI's options are generated from them (:mod:`privreid.commands.options`),
and ``--set SECTION.FIELD=VALUE`` (:func:`privreid.config.sets.apply_sets`) reaches every field, parsed by the field's
type (:func:`privreid.config.values.parse_value`; booleans by :func:`~privreid.config.values.parse_bool`)."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from privreid.config.values import expected, value_fits
from privreid.device import DEVICE_METAVAR, is_device_name
from privreid.errors import ConfigError


@dataclass
class DataConfig:
    """Where the data comes from and how it is split into clients; ``roots`` empty (or ``["synth"]``): the embedded
    synthetic federation."""

    roots: list[str] = field(default_factory=list)
    format: str = "auto"
    protocol: str = "by-dataset"
    train_domains: list[str] | None = None
    test_domains: list[str] | None = None
    num_clients: int | None = None
    height: int = 128
    width: int = 64
    synth_seed: int = 0
    #: fraction of each client's training images kept out of training for membership audits (privreid.data.holdout)
    audit_holdout: float = 0.0


@dataclass
class ModelConfig:
    """Backbone, neck and initial weights of the base model (:func:`privreid.models.build_model`); the method adds its model transforms."""

    arch: str = "resnet18"
    neck: str = "linear"
    feat_dim: int = 512
    last_stride: int = 1
    pretrained: str | None = None
    weights: str | None = None
    #: dropout on the feature before the identity classifier (training only; FedPav's reference code: 0.5)
    dropout: float = 0.0


#: the learning-rate schedules over rounds (:mod:`privreid.federated.lr_schedule`)
LR_SCHEDULES = ("step", "once", "local-step", "none")

#: the ranking metrics of evaluations (:data:`privreid.evaluation.metrics.METRICS`): squared Euclidean distance,
#: or cosine similarity of L2-normalised features (FedPav's and L2RW+'s reference code)
EVAL_METRICS = ("euclidean", "cosine")

#: the average precision of evaluations (:data:`privreid.evaluation.metrics.AP_MODES`): torchreid's over queries
#: with a positive, or the Market-1501 devkit's trapezoid rule over all queries (FedPav's reference evaluate.py)
EVAL_APS = ("torchreid", "devkit")
#: the precisions of a run's passes (:data:`privreid.precision.DTYPES` maps them to dtypes)
PRECISIONS = ("fp32", "bf16", "fp16")
#: the necks of :class:`privreid.models.reid_net.ReIDModel` (:class:`ModelConfig` ``neck``)
NECKS = ("linear", "bnneck", "none")
#: the partition protocols (:class:`DataConfig` ``protocol``; :func:`privreid.data.partition.make_federation`)
PROTOCOLS = ("by-dataset", "by-camera", "by-identity", "ci", "ei", "es")
#: the client optimisers (:class:`OptimConfig` ``optimizer``)
OPTIMIZERS = ("sgd", "adam")
#: where FedReID's beta white noise is added (:class:`PrivacyConfig` ``beta_mode``): Eq. 14, Eq. 15 or both
BETA_MODES = ("upload", "download", "both")
#: what a client's memory keeps between rounds (:class:`FederationConfig` ``client_memory``)
CLIENT_MEMORY = ("full", "private")

#: the largest embedding (--feat-dim) privreid builds: wider than any ReID model (torchreid's: 512 to 2048); a larger
#: one only exhausts memory
MAX_FEAT_DIM = 65536

#: the largest image side (--height, --width) privreid builds: four times any ReID input (256x128, 384x192); a larger
#: one only exhausts memory (one decoded image is 3 H W bytes, a batch's activations hundreds of times more)
MAX_IMAGE_SIDE = 2048

#: the largest seed: numpy's generators take 32-bit seeds (privreid.seeding takes the seed modulo 2**32), so a
#: larger seed would silently alias a smaller one
MAX_SEED = 2**32 - 1

#: DP-SGD's per-sample clipping bound C when --max-grad-norm is not given (Opacus' tutorials use 1.0)
DEFAULT_MAX_GRAD_NORM = 1.0
#: delta of the (epsilon, delta) guarantees when --delta is not given; it must stay below 1/N
DEFAULT_DELTA = 1e-5


@dataclass
class FederationConfig:
    """The method and its federation: ``rounds`` (epochs for centralized/standalone), ``client_fraction`` (``None``:
    the method's), ``method_options`` (``--opt``).  ``client_memory`` (:data:`CLIENT_MEMORY`): ``full`` keeps, for
    methods that score a client's trained local model, a copy of its trained shared keys; ``private`` keeps only
    what training needs (DP accountants, MOON's previous model): personalised models are then the global one with
    local keys, one model per client less on disk."""

    method: str = "fedpav"
    rounds: int = 10
    client_fraction: float | None = None
    client_memory: str = "full"
    method_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimConfig:
    """A client's local training: optimiser, learning rates, losses and augmentation.

    Learning-rate groups: ``lr_backbone`` (the trunk), ``lr_neck`` (the embedding neck; ``None``: the backbone's rate,
    :func:`lr_neck`) and ``lr_head`` (the identity classifier); ``lr_schedule``: :mod:`privreid.federated.lr_schedule`
    (its ``k`` is ``lr_step``).  ``triplet_weight`` ``None`` is the method's default
    (:meth:`~privreid.federated.registry.Method.triplet_weight_for`: FedARKS 1, Eq. 2; others 0)."""

    optimizer: str = "sgd"
    local_epochs: int = 1
    batch_size: int = 32
    lr_backbone: float = 0.005
    lr_head: float = 0.05
    lr_neck: float | None = None
    lr_step: int = 40
    lr_gamma: float = 0.1
    lr_schedule: str = "step"
    momentum: float = 0.9
    weight_decay: float = 5e-4
    label_smoothing: float = 0.1
    random_erasing: float = 0.5
    triplet_weight: float | None = None
    triplet_margin: float = 0.3
    instances_per_id: int = 4
    max_steps_per_epoch: int | None = None


@dataclass
class PrivacyConfig:
    """The privacy defenses (:mod:`privreid.defenses`).

    ``beta``: FedReID's white noise (``beta_mode``: Eq. 14, 15 or both).  ``dp_sgd`` (record-level DP-SGD on every
    client, per-sample clipping to ``max_grad_norm``) or ``client_dp`` (DP-FedAvg: client updates clipped to
    ``clip``): both add Gaussian noise of ``noise_multiplier`` times the clipping bound (DP-SGD: derived from
    ``target_epsilon`` when not given), account with RDP at ``delta`` and stop before ``target_epsilon`` would be
    exceeded (``None``: :data:`DEFAULT_MAX_GRAD_NORM`, :data:`DEFAULT_DELTA`).  ``secure_aggregation``: the server
    learns only the sum of a round's uploads (SecAgg+, :mod:`privreid.defenses.secure_aggregation.mechanism`), with
    ``secagg_shares`` / ``secagg_threshold`` (``None``: the round's clients / a majority of the shares), the
    clipping and quantisation ranges and the public bound of a client's weight (``None``: the round's largest)."""

    beta: float = 0.0
    beta_mode: str = "upload"
    dp_sgd: bool = False
    client_dp: bool = False
    noise_multiplier: float | None = None
    max_grad_norm: float | None = None
    clip: float | None = None
    target_epsilon: float | None = None
    delta: float | None = None
    secure_aggregation: bool = False
    secagg_shares: int | None = None
    secagg_threshold: int | None = None
    secagg_clip: float = 8.0
    secagg_quantization: int = 2**22
    secagg_max_weight: float | None = None


@dataclass
class RobustnessConfig:
    """Poisoning: the server's defenses and the malicious clients."""

    #: server defenses by name -> options (:mod:`privreid.defenses.registry`)
    defenses: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: a poisoning adversary among the clients (:mod:`privreid.malicious_clients`): ``name``, ``malicious`` (a count or
    #: client names) and the attack's options; empty: none
    adversary: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvaluationConfig:
    """The run's evaluations: after every ``every``-th round and after the last (0: after the last only), ranked
    by ``metric`` (:data:`EVAL_METRICS`), with each feature averaged with its mirror image's (``flip``), reporting
    ``ap`` (:data:`EVAL_APS`); all recorded in ``summary.json`` (:func:`evaluation_settings`).  ``report_best`` K:
    ``summary.json``'s ``best`` block is the last evaluation (K = 1) or the mean of the K best global evaluations
    (FedPav, paper 004 Sec. 4.2.2: K = 3), :func:`privreid.federated.best.best_block`."""

    every: int = 0
    flip: bool = False
    metric: str = "euclidean"
    ap: str = "torchreid"
    report_best: int = 1


@dataclass
class RuntimeConfig:
    """Where and how the run computes: its seed, device, precision and data-loading workers."""

    seed: int = 0
    device: str = "auto"
    #: fp32, bf16 or fp16: autocast of the model's passes (:mod:`privreid.precision`)
    precision: str = "fp32"
    #: CUDA only, no effect elsewhere: training batches in channels-last memory format, and cuDNN's autotuner
    #: during training (:func:`privreid.precision.to_device`, :func:`privreid.precision.cuda_speedups`)
    channels_last: bool = True
    cudnn_benchmark: bool = True
    #: torch.compile of the model's trunk and the identity loss (:mod:`privreid.models.compilation`)
    compile: bool = False
    num_workers: int = 0


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    robustness: RobustnessConfig = field(default_factory=RobustnessConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    def with_values(self, values: dict[str, Any]) -> "RunConfig":
        """A copy with each ``SECTION.FIELD`` path of ``values`` set to its value (the paths of ``--set``;
        unchecked: :meth:`validate` checks)."""
        sections: dict[str, dict[str, Any]] = {}
        for path, value in values.items():
            section, name = path.split(".")
            sections.setdefault(section, {})[name] = value
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **changes)
                                            for section, changes in sections.items()})

    def to_dict(self) -> dict[str, Any]:
        """Plain data, a mapping per section (:data:`SECTIONS`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """The configuration ``d`` holds (:meth:`to_dict`'s shape); :class:`ConfigError` naming the first section
        or field that is missing, unknown or of the wrong type (``federation.rounds: "3"``), as a flag would be
        refused: a configuration read from a file (a checkpoint, ``config.yaml``) is checked like one typed."""
        if not isinstance(d, dict):
            raise ConfigError(f"incompatible run configuration: expected a mapping of sections, got "
                              f"{type(d).__name__}")
        unknown = set(d) - set(SECTIONS)
        if unknown:
            raise ConfigError(f"incompatible run configuration: unknown section {sorted(unknown)[0]!r} (sections: "
                              f"{', '.join(SECTIONS)})")
        for section in SECTIONS:
            values = d.get(section)
            if not isinstance(values, dict):
                raise ConfigError(f"incompatible run configuration: section {section!r} is "
                                  f"{'missing' if values is None else 'not a mapping'}")
            types_ = field_types(section)
            for name, value in values.items():
                if name in types_ and not value_fits(value, types_[name]):
                    raise ConfigError(f"incompatible run configuration: {section}.{name} must be "
                                      f"{expected(types_[name])} (got {type(value).__name__} {value!r:.60})")
        try:
            return cls(**{section: kind(**d[section]) for section, kind in SECTIONS.items()})
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"incompatible run configuration: {exc}") from exc

    def validate(self) -> "RunConfig":
        """Check value ranges; raise :class:`ConfigError` naming the bad field.  Every number field must be finite
        first (a NaN would otherwise fail or diverge rounds later), whatever set it: a flag, ``--set`` or a preset."""
        for section in SECTIONS:
            for name, value in dataclasses.asdict(getattr(self, section)).items():
                if isinstance(value, float) and not math.isfinite(value):
                    raise ConfigError(f"{section}.{name} must be a finite number (got {value})")
        d, m, f, o, p, e, r = (self.data, self.model, self.federation, self.optim, self.privacy, self.evaluation,
                               self.runtime)
        lrs = [o.lr_backbone, o.lr_head] + ([] if o.lr_neck is None else [o.lr_neck])
        checks = [
            (f.rounds > 0, f"rounds must be > 0 (got {f.rounds})"),
            (o.local_epochs > 0, f"local_epochs must be > 0 (got {o.local_epochs})"),
            (o.batch_size > 0, f"batch_size must be > 0 (got {o.batch_size})"),
            (f.client_fraction is None or 0.0 < f.client_fraction <= 1.0,
             f"client_fraction must be in (0, 1] (got {f.client_fraction})"),
            (all(math.isfinite(v) and v >= 0 for v in lrs), f"learning rates must be finite and >= 0 (got "
             f"--lr-backbone {o.lr_backbone}, --lr-head {o.lr_head}, --lr-neck {o.lr_neck})"),
            (math.isfinite(o.lr_gamma) and 0.0 < o.lr_gamma <= 1.0, f"lr_gamma must lie in (0, 1] (a decay "
             f"factor; got {o.lr_gamma})"),
            (math.isfinite(p.beta), f"beta must be finite (got {p.beta})"),
            (o.batch_size >= 2, f"batch_size must be >= 2: BatchNorm needs two samples per batch (got "
             f"{o.batch_size})"),
            (r.num_workers >= 0, f"workers must be >= 0 (got {r.num_workers})"),
            (0.0 <= o.random_erasing <= 1.0, f"random_erasing must lie in [0, 1] (a probability; got "
             f"{o.random_erasing})"),
            (1 <= m.feat_dim <= MAX_FEAT_DIM, f"feat_dim must lie in [1, {MAX_FEAT_DIM}] (got {m.feat_dim})"),
            (0.0 <= o.label_smoothing < 1.0, f"label_smoothing must lie in [0, 1) (got {o.label_smoothing})"),
            (0.0 <= m.dropout < 1.0, f"dropout must lie in [0, 1) (got {m.dropout})"),
            (e.report_best >= 1, f"report_best must be >= 1 (got {e.report_best})"),
            (f.client_memory in CLIENT_MEMORY, f"client_memory must be one of {', '.join(CLIENT_MEMORY)} (got "
             f"{f.client_memory!r})"),
            (e.every >= 0, f"eval_every must be >= 0 (got {e.every})"),
            (e.ap in EVAL_APS, f"eval_ap must be one of {', '.join(EVAL_APS)} (got {e.ap!r})"),
            (e.metric in EVAL_METRICS, f"eval_metric must be one of {', '.join(EVAL_METRICS)} (got "
             f"{e.metric!r})"),
            (o.momentum >= 0, f"momentum must be >= 0 (got {o.momentum})"),
            (o.weight_decay >= 0, f"weight_decay must be >= 0 (got {o.weight_decay})"),
            (o.triplet_margin >= 0, f"triplet_margin must be >= 0 (got {o.triplet_margin})"),
            (0 <= r.seed <= MAX_SEED, f"seed must be in 0..{MAX_SEED} (got {r.seed})"),
            (o.lr_step > 0, f"lr_step must be > 0 (got {o.lr_step})"),
            (o.lr_schedule in LR_SCHEDULES, f"lr_schedule must be one of {', '.join(LR_SCHEDULES)} (got "
             f"{o.lr_schedule!r})"),
            (o.triplet_weight is None or o.triplet_weight >= 0, "triplet_weight must be >= 0"),
            (p.beta >= 0, f"beta must be >= 0 (got {p.beta})"),
            (p.beta_mode in BETA_MODES, f"beta_mode must be upload, download or both "
             f"(got {p.beta_mode!r})"),
            (o.optimizer in OPTIMIZERS, f"optimizer must be sgd or adam (got {o.optimizer!r})"),
            (0 < o.instances_per_id <= o.batch_size, f"instances_per_id must lie in [1, batch_size {o.batch_size}] "
             f"(a PK batch holds K instances of each of its identities; got {o.instances_per_id})"),
            (o.max_steps_per_epoch is None or o.max_steps_per_epoch > 0, "max_steps_per_epoch must be > 0"),
            (0.0 <= d.audit_holdout < 1.0, f"audit_holdout must lie in [0, 1) (got {d.audit_holdout})"),
            (d.height >= 16 and d.width >= 8, f"image size {d.height}x{d.width} is too small (min 16x8)"),
            (max(d.height, d.width) <= MAX_IMAGE_SIDE, too_large_image(d.height, d.width, batch=o.batch_size)),
            (is_device_name(r.device), f"device must be one of {DEVICE_METAVAR} (got {r.device!r})"),
        ]
        checks += _privacy_checks(self) + [
            (r.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)} (got {r.precision!r})"),
            (not (p.dp_sgd and r.precision == "fp16"), "--dp-sgd with --precision fp16 is not supported: Opacus 1.6 "
             "runs DP-SGD under autocast but not with a gradient scaler, whose scaled gradients its per-sample "
             "clipping would clip; use --precision bf16 or fp32"),
            (not (p.dp_sgd and r.compile), "--dp-sgd with --compile is not supported: Opacus's per-sample "
             "gradient hooks on the model's modules do not fire inside a compiled graph; drop --compile"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        return self


def too_large_image(height: int, width: int, *, batch: int | None = None) -> str:
    """Why an image of ``height`` x ``width`` is refused: the one memory rule of every image size privreid
    allocates (:data:`MAX_IMAGE_SIDE` per side), for ``--height``/``--width`` and ``corrupt --size`` alike."""
    return (f"image size {height}x{width} is too large (max {MAX_IMAGE_SIDE} per side: one decoded image alone "
            f"would take {3 * height * width / 2**20:.0f} MiB" + (f", a batch of {batch} a multiple of that)"
                                                                    if batch else ")"))


#: why DP-SGD refuses a run with the triplet loss (checked by :meth:`RunConfig.validate` for ``--triplet-weight``
#: and by the composition root, :mod:`privreid.composition`, for a method's default)
DP_SGD_TRIPLET = ("--dp-sgd cannot bound a sample's influence on the batch-hard triplet loss (it couples the samples "
                  "of a batch); use --triplet-weight 0")


def lr_neck(config: RunConfig) -> float:
    """The neck's learning rate: ``--lr-neck``, else the backbone's (``--lr-backbone``)."""
    return config.optim.lr_backbone if config.optim.lr_neck is None else config.optim.lr_neck


def evaluation_settings(config: RunConfig) -> dict[str, Any]:
    """How every evaluation of the run ranks: ``{"metric", "flip", "ap"}`` (``summary.json``'s ``evaluation`` block)."""
    return {"metric": config.evaluation.metric, "flip": config.evaluation.flip, "ap": config.evaluation.ap}


def dp_delta(config: RunConfig) -> float:
    """The delta of the run's (epsilon, delta) guarantees: ``--delta``, else :data:`DEFAULT_DELTA`."""
    return DEFAULT_DELTA if config.privacy.delta is None else config.privacy.delta


def dp_max_grad_norm(config: RunConfig) -> float:
    """DP-SGD's per-sample clipping bound C: ``--max-grad-norm``, else :data:`DEFAULT_MAX_GRAD_NORM`."""
    return DEFAULT_MAX_GRAD_NORM if config.privacy.max_grad_norm is None else config.privacy.max_grad_norm


def _positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)


def _privacy_checks(config: RunConfig) -> list[tuple[bool, str]]:
    """Ranges and combinations of the differential-privacy fields (flag names as on the CLI)."""
    t = config.privacy
    knobs = {"--noise-multiplier": t.noise_multiplier, "--max-grad-norm": t.max_grad_norm, "--clip": t.clip,
             "--target-epsilon": t.target_epsilon, "--delta": t.delta}
    given = [flag for flag, value in knobs.items() if value is not None]
    return [
        (_positive(t.noise_multiplier), f"noise_multiplier must be > 0 (got {t.noise_multiplier})"),
        (_positive(t.max_grad_norm), f"max_grad_norm must be > 0 (got {t.max_grad_norm})"),
        (_positive(t.clip), f"clip must be > 0 (got {t.clip})"),
        (_positive(t.target_epsilon), f"target_epsilon must be > 0 (got {t.target_epsilon})"),
        (t.delta is None or 0 < t.delta < 1, f"delta must lie in (0, 1) (got {t.delta})"),
        (not (t.dp_sgd and t.client_dp), "--dp-sgd and --client-dp exclude each other (they share "
         "--noise-multiplier, --target-epsilon and --delta)"),
        (t.dp_sgd or t.client_dp or not given, f"{', '.join(given)} given without --dp-sgd or --client-dp"),
        (not t.dp_sgd or t.clip is None, "--clip bounds client updates (--client-dp); DP-SGD clips per-sample "
         "gradients with --max-grad-norm"),
        (not t.dp_sgd or t.noise_multiplier is not None or t.target_epsilon is not None,
         "--dp-sgd needs --noise-multiplier Z or --target-epsilon E"),
        (not t.dp_sgd or not config.optim.triplet_weight, DP_SGD_TRIPLET),
        (not t.client_dp or t.max_grad_norm is None, "--max-grad-norm clips per-sample gradients (--dp-sgd); "
         "client-level DP clips client updates with --clip"),
        (not t.client_dp or t.clip is not None, "--client-dp needs --clip S (the L2 bound of a client update)"),
        (not t.client_dp or t.noise_multiplier is not None, "--client-dp needs --noise-multiplier Z "
         "(--target-epsilon then stops training before the budget is exceeded)"),
    ] + _secagg_checks(t)


def _secagg_checks(t: PrivacyConfig) -> list[tuple[bool, str]]:
    """Ranges of the secure-aggregation settings; the federation-dependent checks run in the privacy ledger."""
    knobs = {"--secagg-shares": t.secagg_shares, "--secagg-threshold": t.secagg_threshold,
             "--secagg-max-weight": t.secagg_max_weight,
             "--secagg-clip": None if t.secagg_clip == 8.0 else t.secagg_clip,
             "--secagg-quantization": None if t.secagg_quantization == 2**22 else t.secagg_quantization}
    given = [flag for flag, value in knobs.items() if value is not None]
    return [
        (t.secure_aggregation or not given, f"{', '.join(given)} given without --secure-aggregation"),
        (_positive(t.secagg_clip), f"secagg_clip must be > 0 (got {t.secagg_clip})"),
        (_positive(t.secagg_max_weight), f"secagg_max_weight must be > 0 (got {t.secagg_max_weight})"),
        (isinstance(t.secagg_quantization, int) and t.secagg_quantization >= 2,
         f"secagg_quantization must be an integer >= 2 (got {t.secagg_quantization})"),
    ]


SECTIONS = {"data": DataConfig, "model": ModelConfig, "federation": FederationConfig, "optim": OptimConfig,
            "privacy": PrivacyConfig, "robustness": RobustnessConfig, "evaluation": EvaluationConfig,
            "runtime": RuntimeConfig}


def field_types(section: str) -> dict[str, Any]:
    """Field name -> type of one section of :class:`RunConfig` (a key of :data:`SECTIONS`)."""
    return typing.get_type_hints(SECTIONS[section])


#: ``privreid train`` options whose name is not their field's (a preset's keys, the deviations' options)
_OPTION_PATHS = {"data": "data.roots", "workers": "runtime.num_workers", "opt": "federation.method_options", "max-steps":
                 "optim.max_steps_per_epoch", **{f"eval-{name}": f"evaluation.{name}" for name in ("every", "flip",
                                                                                                    "metric", "ap")}}


def option_path(option: str) -> str | None:
    """``SECTION.FIELD`` that the ``privreid train`` option ``option`` (``lr-backbone``, ``--lr-backbone``) sets;
    ``None`` for an option that sets no field.  Field names are unique across sections."""
    option = option.lstrip("-")
    if option in _OPTION_PATHS:
        return _OPTION_PATHS[option]
    name = option.replace("-", "_")
    return next((f"{section}.{name}" for section in SECTIONS if name in field_types(section)), None)
