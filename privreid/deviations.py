"""Recipe deviations: where a run differs from the paper its method implements.

Every ``summary.json`` carries ``"deviations": deviations(config, method)``, one sentence per active deviation, so a
number is never put next to a paper's without saying how its recipe differs.  Everything is derived from the
:class:`~privreid.config.RunConfig` by the rules of this module, in one place where method authors add theirs:

* :data:`PAPER_RECIPES`: per method, the settings its paper states and, where the paper is silent, its authors'
  released code uses (:class:`PaperValue`: the option, the paper's value, the source).  A run whose effective value
  differs gets ``"--last-stride 1 (FedPav: 2; reference code cap-ntu/FedReID)"``.  The paper presets in ``configs/``
  set these values; a test checks that they produce no recipe deviation.
* :data:`RULES`: other deviations, each a :class:`Rule` (a predicate on the config and its sentence): label smoothing
  on the identity loss (all five papers use plain cross-entropy), capped local epochs, DPPT's local classifiers,
  FedARKS' fixed part bands, ...

Scale settings (backbone, image size, rounds, learning rates) are listed like any other recipe value: a ResNet-18
trained from scratch for 5 rounds on 64x32 images is not the paper's experiment, and the list says so.  Settings the
paper leaves open and no reference code fixes are not deviations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from privreid.config import RunConfig, lr_neck, option_path
from privreid.federated.registry import Method


@dataclass(frozen=True)
class Run:
    """A configuration with its resolved method (the composition root's): what recipe values and rules read.

    It reads as its configuration (``run.optim``, ``run.model``, ...) plus :meth:`option`.
    """

    config: RunConfig
    method: Method

    def __getattr__(self, name: str) -> Any:
        return getattr(self.config, name)

    def option(self, key: str) -> Any:
        """The value of the method's option ``key``: ``--opt`` if given (typed), else the method's default."""
        return self.method.option(self.config, key)


def _client_fraction(run: Run) -> float:
    given = run.federation.client_fraction
    return run.method.client_fraction if given is None else given


#: options whose effective value is not the raw field (None = a default applies)
_EFFECTIVE: dict[str, Callable[[Run], Any]] = {
    "--lr-neck": lr_neck,
    "--triplet-weight": lambda run: run.method.triplet_weight_for(run.config),
    "--client-fraction": _client_fraction,
}


@dataclass(frozen=True)
class PaperValue:
    """One setting a paper fixes: the option (as a user sets it), the paper's value, where it is stated.

    ``value`` may be a tuple of accepted values, or a function of the config returning the value (or tuple); DPPT's
    epochs depend on the protocol.  The run's value (:meth:`actual`) is the method's option for ``--opt NAME``, else the
    field the option sets, or its effective value where ``None`` means a default applies.  ``prose``: where the
    paper's text states another value than its released code (``source``), which the paper presets follow; a run with
    the code's value then lists the prose it departs from (:func:`prose_departures`).
    """

    option: str
    value: Any
    source: str
    prose: str | None = None

    def expected(self, run: Run) -> Any:
        return self.value(run) if callable(self.value) else self.value

    def actual(self, run: Run) -> Any:
        if self.option.startswith("--opt "):
            return run.option(self.option.removeprefix("--opt "))
        if self.option in _EFFECTIVE:
            return _EFFECTIVE[self.option](run)
        section, name = option_path(self.option).split(".")
        return getattr(getattr(run, section), name)


@dataclass(frozen=True)
class Recipe:
    """A paper's recipe: its name in the sentences and its :class:`PaperValue` s."""

    paper: str
    values: Sequence[PaperValue]


def _same(a: Any, b: Any) -> bool:
    """``a`` is ``b`` (numbers to 1e-12 relative), or one of ``b`` when ``b`` is a tuple."""
    if isinstance(b, tuple):
        return any(_same(a, x) for x in b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(b)))
    return a == b


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return " or ".join(_show(v) for v in value)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _stated(source: str, *settings: tuple[str, Any]) -> tuple[PaperValue, ...]:
    """The ``(option, value)`` settings that one ``source`` states, in order."""
    return tuple(PaperValue(option, value, source) for option, value in settings)


def _sgd(source: str) -> tuple[PaperValue, ...]:
    """SGD with momentum 0.9 and weight decay 5e-4, as all four recipes below state it (each with its source)."""
    return _stated(source, ("--optimizer", "sgd"), ("momentum", 0.9), ("weight_decay", 5e-4))


WU_GONG_CODE = "reference code SunTongtongtong/FedReid"


def _wu_gong_code() -> tuple[PaperValue, ...]:
    """Input size, last stride and augmentation of Wu & Gong's released code (their papers 002 and 000 leave
    them open)."""
    return _stated(WU_GONG_CODE, ("--height", 256), ("--width", 128), ("--last-stride", 2), ("--random-erasing", 0.0))


def _wu_gong_training(source: str, lr_step: int, schedule: PaperValue) -> tuple[PaperValue, ...]:
    """The local-training recipe that both Wu & Gong papers state (002 Sec. IV-A, 000 Sec. 4.2): :func:`_sgd`,
    learning rates 0.01 (backbone) and 0.1 (head) decayed by 0.1 at ``lr_step`` rounds by ``schedule``, batch size
    32, one local epoch, 100 rounds; ranking by Euclidean distance (their code's ``evaluate.py``)."""
    return (*_sgd(source),
            *_stated(source, ("--lr-backbone", 0.01), ("--lr-head", 0.1), ("--lr-step", lr_step), ("--lr-gamma", 0.1),
                     ("--batch-size", 32), ("--local-epochs", 1), ("--rounds", 100)),
            schedule,
            PaperValue("--eval-metric", "euclidean", f"{WU_GONG_CODE} evaluate.py: Euclidean distance"),
            PaperValue("--eval-ap", "devkit", f"{WU_GONG_CODE} evaluation/compute_mAP.py:26-33, evaluate.py:40: the "
                       "Market-1501 devkit's trapezoid AP, averaged over all queries"))


FEDPAV_CODE = "reference code cap-ntu/FedReID"
P004 = "paper 004"
FEDPAV = Recipe("FedPav", (
    *_stated(f"{P004} Sec. 4", ("--arch", "resnet50"), ("--pretrained", "imagenet")),
    *_stated(FEDPAV_CODE, ("--height", 256), ("--width", 128), ("--neck", "linear"), ("--feat-dim", 512),
             ("--last-stride", 2), ("--dropout", 0.5), ("--random-erasing", 0.0)),
    PaperValue("--triplet-weight", 0.0, f"{P004} Sec. 3.3, IDE: identity loss only"),
    *_sgd(f"{P004} Sec. 3.5"),
    *_stated(f"{P004} Sec. 3.5", ("--lr-backbone", 0.005), ("--lr-head", 0.05)),
    PaperValue("--lr-neck", 0.05, f"{FEDPAV_CODE}: the 512-d bottleneck trains with the classifier"),
    *_stated(f"{P004} Sec. 3.5", ("--lr-step", 40), ("--lr-gamma", 0.1), ("--batch-size", 32), ("--local-epochs", 1),
             ("--rounds", 300)),
    PaperValue("--lr-schedule", "local-step", f"{FEDPAV_CODE} client.py: a new StepLR(step_size=40) in every local "
               "train(), stepped once per local epoch, so with one local epoch the rate never decays",
               prose=f"{P004} Sec. 3.5: x0.1 every 40 rounds (--lr-schedule step), which over 300 rounds leaves "
                     "10^-7 of the rate"),
    PaperValue("--eval-metric", "cosine", f"{FEDPAV_CODE} evaluate.py: dot product of L2-normalised features"),
    PaperValue("--eval-ap", "devkit", f"{FEDPAV_CODE} evaluate.py: the Market-1501 devkit's trapezoid AP, averaged "
               "over all queries"),
    PaperValue("--opt bn_buffers", "first", f"{FEDPAV_CODE} server.py:15-50: parameters averaged, BatchNorm running "
               "statistics taken from the first sampled client"),
    PaperValue("--client-fraction", 1.0, f"{FEDPAV_CODE}: every client trains every round"),
    PaperValue("--eval-every", 10, f"{P004} Sec. 4.2.2"),
    PaperValue("--report-best", 3, f"{P004} Sec. 4.2.2: the mean of the three best global models"),
    PaperValue("--eval-flip", True, FEDPAV_CODE),
))

#: FedPav and its CDW / KD / CC variants (paper 004 Algorithms 1-3)
FEDPAV_METHODS = ("fedpav", "fedpav-cdw", "fedpav-kd", "fedpav-cc", "fedpav-cdw-kd", "fedpav-cdw-cc")

P002 = "paper 002 Sec. IV-A"
WU_GONG_NO_NECK = (f"{WU_GONG_CODE} lib/model.py embedding_net_test: retrieval on the 2048-d pooled ResNet-50 "
                   "feature, no BatchNorm")
FEDREID = Recipe("FedReID", (
    *_stated(P002, ("--arch", "resnet50"), ("--pretrained", "imagenet")),
    PaperValue("--neck", "none", f"{P002}: a 2048-d feature; {WU_GONG_NO_NECK}"),
    PaperValue("--opt mapping_slope", 0.1, f"{WU_GONG_CODE} lib/model.py MLP: LeakyReLU(0.1)",
               prose="paper 002 Eq. 7: ReLU (--opt mapping_slope=0)"),
    *_wu_gong_code(),
    PaperValue("--triplet-weight", 0.0, "paper 002 Sec. III: identity loss"),
    *_stated(P002, ("--client-fraction", 0.5), ("--beta", 0.0)),
    *_wu_gong_training(P002, lr_step=20, schedule=PaperValue(
        "--lr-schedule", "once", f"{WU_GONG_CODE} lib/localUpdate.py: x0.1 from round 20 on, once "
        "(paper 002 Sec. IV-A: \"decay by 0.1 after 20 global epochs\")")),
    PaperValue("--eval-flip", True, WU_GONG_CODE),
))

P000 = "paper 000 Sec. 4.2"
SKA = Recipe("SKA", (
    *_stated(P000, ("--arch", "resnet50"), ("--pretrained", "imagenet")),
    PaperValue("--neck", "none", WU_GONG_NO_NECK),
    PaperValue("--opt head", "mlp", f"{P000}: two fully-connected layers for classification ({WU_GONG_CODE} "
               "lib/model.py MLP)"),
    *_wu_gong_code(),
    PaperValue("--triplet-weight", 0.0, "paper 000 Algorithm 1: identity loss"),
    *_wu_gong_training(P000, lr_step=40, schedule=PaperValue("--lr-schedule", "step",
                                                             f"{P000}: decay by 0.1 every 40 global epochs")),
    PaperValue("--eval-flip", True, WU_GONG_CODE),
))

FEDARKS = Recipe("FedARKS", (
    PaperValue("--arch", "resnet50", "paper 001 Experimental Setup"),
    PaperValue("--triplet-weight", 1.0, "paper 001 Eq. 2"),
    PaperValue("--rounds", 40, "paper 001 Fig. 4"),
    PaperValue("--opt v", 0.5, "paper 001 Eq. 1"),
    PaperValue("--opt beta", 5.0, "paper 001 Eq. 4"),
    PaperValue("--opt gamma", 0.7, "paper 001 Eq. 6"),
))


def _ei_or_ci(ei: Any, ci: Any) -> Callable[[Run], Any]:
    """A DPPT value that depends on the protocol: ``ei`` under EI (``by-dataset`` too), else ``ci`` (CI images)."""
    return lambda run: ei if run.data.protocol in ("ei", "by-dataset") else ci


L2RW_CODE = "reference code Joey623/L2RW"
P003 = "paper 003 Sec. IV-B"
DPPT = Recipe("L2RW+ DPPT", (
    *_stated(P003, ("--arch", "resnet50"), ("--pretrained", "imagenet"), ("--height", 288), ("--width", 144)),
    PaperValue("--neck", "bnneck", f"{L2RW_CODE}: a BatchNorm bottleneck"),
    *_stated(L2RW_CODE, ("--last-stride", 1), ("--random-erasing", 0.0)),
    *_sgd(P003),
    PaperValue("--lr-head", 0.2, f"{P003}: the initial learning rate"),
    PaperValue("--lr-neck", 0.2, f"{L2RW_CODE}: the bottleneck trains with the classifier"),
    PaperValue("--lr-backbone", 0.02, f"{L2RW_CODE}: 0.1 x the learning rate"),
    PaperValue("--opt onecycle", True, f"{P003}: OneCycleLR"),
    PaperValue("--batch-size", 64, P003),
    PaperValue("--opt instances", 8, f"{P003}: 8 identities x 8 images"),
    PaperValue("--local-epochs", 1, L2RW_CODE),
    PaperValue("--rounds", _ei_or_ci((30,), (50, 100)), f"{P003}: CI 50, EI 30, video 100"),
    PaperValue("--opt topk", _ei_or_ci(3, 5), f"{L2RW_CODE}: top_k 5 for CI images (CI/train.py), 3 for EI "
               "(EI/train.py:134); 4 for HITSZ-VCM video", prose=f"{P003}: TOP K = 4"),
    PaperValue("--opt peak", _ei_or_ci(16 / 30, 0.32), f"{L2RW_CODE}: the one-cycle peaks at epoch 16 (CI 16 of 50, "
               "EI 16 of 30, EI/train.py:60-62)"),
    PaperValue("--opt persistent_optimizer", True, f"{L2RW_CODE} CI/train.py:399-402: one SGD optimiser per client, "
               "its momentum kept across rounds"),
    PaperValue("--opt neck_bias", True, f"{L2RW_CODE} CI/model.py:39-40: the BNNeck bias is trainable"),
    *_stated(P003, ("--opt lambda_mrb", 1.0), ("--opt base", "fedavg")),
    PaperValue("--eval-flip", False, L2RW_CODE),
    PaperValue("--eval-metric", "cosine", f"{L2RW_CODE} CI/test.py: L2-normalised features"),
))

#: method -> the recipe of the paper it implements (baselines such as fedavg have none)
PAPER_RECIPES: dict[str, Recipe] = {
    **{name: FEDPAV for name in FEDPAV_METHODS},
    "fedreid": FEDREID,
    "ska": SKA,
    "fedarks": FEDARKS,
    "dppt": DPPT,
}


@dataclass(frozen=True)
class Rule:
    """A deviation that is not a single recipe value: ``applies(run)`` and its sentence ``text(run)``."""

    name: str
    applies: Callable[[Run], bool]
    text: Callable[[Run], str]


def _method(*names: str) -> Callable[[Run], bool]:
    return lambda run: run.federation.method in names


def _round_attack(run: Run):
    """The run's attack on the round's uploads together (:mod:`privreid.malicious_clients.updates`) and its
    settings, or None."""
    from privreid.malicious_clients import acts_on_rounds, settings_of

    found = settings_of(run.config)
    return found if found and acts_on_rounds(found[0]) else None


def _collusion(run: Run) -> str:
    adversary, settings = _round_attack(run)
    known = ("the round's benign updates" if settings["knowledge"] == "full"
             else "the malicious clients' own honest updates only (knowledge=partial)")
    own = f"; {adversary.deviation}" if adversary.deviation else ""
    return (f"adversary {adversary.name}: collusion simulated at the server: the malicious uploads are rewritten "
            f"with knowledge of {known} before any defense sees them; the server learns nothing more{own}")


def _dppt_local_classifier(run: Run) -> bool:
    return run.federation.method == "dppt" and not run.option("shared_classifier")


def _defense_deviations(run: Run) -> str:
    from privreid.defenses.registry import enabled_defenses

    return "; ".join(filter(None, (d.deviation(run.config) for d in enabled_defenses(run.config))))


#: every deviation that is not a recipe value; add a method's rules here
RULES: tuple[Rule, ...] = (
    Rule("defenses", lambda c: bool(_defense_deviations(c)), _defense_deviations),
    Rule("precision", lambda c: c.runtime.precision != "fp32",
         lambda c: f"--precision {c.runtime.precision}: convolutions and matrix products under autocast in "
                   f"{c.runtime.precision} (the papers and their code train and evaluate in fp32)"),
    Rule("label-smoothing", lambda c: c.optim.label_smoothing > 0,
         lambda c: f"identity loss with label smoothing {c.optim.label_smoothing:g} (the five papers and their "
                   "code use plain cross-entropy: --label-smoothing 0)"),
    Rule("max-steps", lambda c: c.optim.max_steps_per_epoch is not None,
         lambda c: f"local epochs capped at {c.optim.max_steps_per_epoch} batches (--max-steps; the papers train "
                   "whole epochs)"),
    Rule("dppt-local-classifier", _dppt_local_classifier,
         lambda c: "DPPT with a local classifier per client over its own identities (--opt shared_classifier=false); "
                   "L2RW+ Eq. 8 / Algorithm 1 and its code average one classifier over the federation's global "
                   "identity labels"),
    Rule("constrain-scale-once", lambda c: c.robustness.adversary.get("name") == "constrain-scale",
         lambda c: "constrain-scale projects the backdoor's update onto the L2 ball once, after local training (PGD, "
                   "Sun et al. 2019 / Wang et al. 2020, projects after every step), without Bagdasaryan et al.'s "
                   "anomaly loss term"),
    Rule("neurotoxin-final-mask", lambda c: c.robustness.adversary.get("name") == "neurotoxin",
         lambda c: "neurotoxin masks the update once, after local training (Zhang et al. 2022 mask the gradient at "
                   "every step), and masks nothing at a malicious client's first participation"),
    Rule("secure-aggregation", lambda c: c.privacy.secure_aggregation,
         lambda c: "secure aggregation sums pre-scaled updates, not parameters as Flower's SecAgg+ mod does, with "
                   "max_weight the round's largest client weight (Flower: 1000); integer buffers keep the server's "
                   "values; a Flower run equals the in-process run bit for bit only when its sites use the same "
                   "torch thread count (otherwise values at a quantum boundary round one quantum apart); on Flower "
                   "each site's weight, scalar metrics and saturation count travel in the clear, and each site keeps "
                   "its SecAgg+ protocol state (secret keys, shares) in an owner-only file in its state-dir between "
                   "stages, deleted once it has answered unmask" + ("; distributed client DP is accounted as the continuous Gaussian mechanism "
                               "(quantisation and clipping of the noise are not accounted)" if c.privacy.client_dp
                               else "")),
    Rule("adversary-collusion", lambda c: _round_attack(c) is not None, _collusion),
    Rule("fedpav-selection", _method(*FEDPAV_METHODS),
         lambda c: "FedPav reports the global model's evaluations (the last, or the mean of the --report-best K best "
                   "by mean seen rank-1); paper 004 Alg. 1 returns each client's best local model, the reference code "
                   "keeps the last model (cap-ntu/FedReID main.py:111-112) and the paper's 'mean of the 3 best' "
                   "is picked on the test results by experiments/plot_Rank1_mAP_bar.py:18-47"),
    Rule("fedpav-classifier-bias", _method(*FEDPAV_METHODS),
         lambda c: "the identity classifier has no bias and the neck's BatchNorm weight starts at 1; the FedPav "
                   "reference code's ClassBlock classifier nn.Linear(512, n) has a zero-initialised bias trained at "
                   "the classifier's rate and its BatchNorm weight starts from N(1, 0.02^2) (cap-ntu/FedReID "
                   "model.py:29-31, 59-62); with the bias frozen at zero the reference's first steps and round equal "
                   "privreid's (tests/test_reference_fedpav_steps.py)"),
    Rule("cmc-queries", _method(*FEDPAV_METHODS, "fedreid", "ska"),
         lambda c: "CMC is averaged over the queries with a positive in the gallery (torchreid); the reference "
                   "code divides by all queries (" + ("SunTongtongtong/FedReid evaluate.py:39" if c.federation.method in
                                                       ("fedreid", "ska") else "cap-ntu/FedReID evaluate.py:88") + ")"),
    Rule("fedreid-selection", _method("fedreid"),
         lambda c: "FedReID reports the global model's last evaluation; the reference code keeps the server model "
                   "with the lowest validation loss (client 1's validation split, through its mapping network) among "
                   "the rounds from 70% of the run on (SunTongtongtong/FedReid lib/fedreid_train.py:87-95)"),
    Rule("wu-gong-input-size", _method("fedreid", "ska"),
         lambda c: "training images are resized to the input size and padded-and-cropped, test images resized to it "
                   "(bilinear); the Wu & Gong reference code resizes to 288x144 (bicubic), random-crops 256x128 and "
                   "tests at 288x144 (SunTongtongtong/FedReid utils/get_dataset.py:17-19, 61)"),
    Rule("fedreid-first-participation", lambda c: c.federation.method == "fedreid" and _client_fraction(c) < 1.0,
         lambda c: "a client first selected after round 1 starts from the server model; the reference code "
                   "half-averages it with the initial model it stored for every client (SunTongtongtong/FedReid "
                   "lib/fedreid_train.py:31-32)"),
    Rule("fedreid-server-copy-mapping", _method("fedreid"),
         lambda c: "the server copy computes its predictions with the client's mapping network, detached; the "
                   "reference code's copy trains its own copy of that network with the copy's identity loss during "
                   "local training (SunTongtongtong/FedReid lib/localUpdate.py:75-78), so from the second step its "
                   "identity loss and the KL term differ (tests/test_reference_fedreid_steps.py)"),
    Rule("fedpav-cdw-probe", _method("fedpav", "fedpav-kd", "fedpav-cc"),
         lambda c: "without CDW no probe forward runs; the FedPav reference code runs its CDW probe every round "
                   "(client.py:102): one train-mode forward of a training batch that updates the BatchNorm "
                   "statistics of the uploaded model and, from round 1, of the global model"),
    Rule("fedpav-kd-cadence", _method("fedpav-kd", "fedpav-cdw-kd"),
         lambda c: "knowledge distillation runs after every aggregation, as paper 004 Alg. 3 says; the reference "
                   "code distils every 10th round (cap-ntu/FedReID main.py:113-117), with every client (not only "
                   "the round's) as teacher; privreid keeps the paper's cadence because its strategies are pure "
                   "functions of one round's uploads and the reference's cadence is tied to its evaluation loop"),
    Rule("fedpav-first-buffers", lambda c: c.federation.method in FEDPAV_METHODS and c.option("bn_buffers") == "first",
         lambda c: "--opt bn_buffers=first takes the BatchNorm statistics of the round's first client in client "
                   "order; the reference code's client order is random each round (cap-ntu/FedReID server.py:83)"),
    Rule("dppt-pooling", _method("dppt"),
         lambda c: "DPPT pools the trunk by global average pooling (L2RW+ reference code: GeM pooling)"),
    Rule("dppt-reference-training", _method("dppt"),
         lambda c: "DPPT's training differs from the L2RW+ reference code (Joey623/L2RW CI/) in: the BNNeck weight "
                   "starts at 1 (code: N(1, 0.01^2)); the one-cycle rate of step b is the code's of step b+1 (its "
                   "adjust_lr reads lrs[batch_idx - 1], train.py:407); full precision (code: mixed precision); no "
                   "Pad(10) + random crop augmentation; FedAvg weights are image counts (code: rounded down to a "
                   "multiple of 64, train.py:626-629); the MRB loss runs from the first epoch on normalised "
                   "features (code: off in epoch 1, 0.5 MSE + 0.5 cosine on raw features towards prototypes "
                   "averaged with absent identities counted as zeros, loss.py:52-75, train.py:596-609)"),
    Rule("dppt-test-feature", _method("dppt"),
         lambda c: "DPPT ranks the post-BNNeck feature; the reference code prints both the pre-BN (GeM) and the "
                   "post-BN feature's results (CI/test.py:204-207) and the paper does not say which it reports"),
    Rule("fedarks-part-bands", _method("fedarks"),
         lambda c: "FedARKS body parts are fixed horizontal bands of the feature map (head 0-25%, torso 25-55%, "
                   "legs 55-100%), not PifPaf keypoints (paper 001, RK)"),
    Rule("ska-an-weights", lambda c: c.federation.method == "ska" and c.model.pretrained is not None
         and c.option("an"),
         lambda c: "SKA's attentive-norm layers start from ImageNet BatchNorm weights (paper 000: attentive "
                   "normalisation pretrained on ImageNet)"),
    Rule("ska-an-architecture", lambda c: c.federation.method == "ska" and c.option("an"),
         lambda c: "SKA's attentive normalisation sits in torchvision's ResNet-50 and gates its mixture with "
                   "Linear + hard sigmoid; the AN ResNet-50 the reference code loads (SunTongtongtong/FedReid "
                   "lib/resnet50_AN.py:_resnet, checkpoint resnet-50-an-imagenet-200e-lbsmth-mixup, whose config "
                   "of that name in iVMCL/AOGNet-v2 sets norm_attention_mode 2, imagenet_head7x7 false, "
                   "replace_stride_with_avgpool true) puts a BatchNorm between the attention conv and the hard "
                   "sigmoid (lib/AttNorm_AN.py:83-86), a three-conv 3x3 stem and average-pool downsampling"),
)


def _setting(value: PaperValue, actual: Any) -> str:
    """``--opt name=value`` or ``--option value``, as a user sets it."""
    return f"{value.option}={_show(actual)}" if value.option.startswith("--opt ") else f"{value.option} {_show(actual)}"


def _recipe(config: RunConfig, method: Method) -> list[tuple[str, PaperValue, Any, Any]]:
    """``(paper, value, the run's value, the paper's)`` per value of the method's recipe (none for baselines)."""
    run, recipe = Run(config, method), PAPER_RECIPES.get(config.federation.method)
    return [(recipe.paper, v, v.actual(run), v.expected(run)) for v in (recipe.values if recipe else ())]


def recipe_deviations(config: RunConfig, method: Method) -> list[str]:
    """One sentence per setting where ``config`` (training ``method``) differs from its method's paper recipe."""
    return [f"{_setting(v, actual)} ({paper}: {_show(expected)}; {v.source}"
            + ("" if v.prose is None else f"; the paper's prose: {v.prose}") + ")"
            for paper, v, actual, expected in _recipe(config, method) if not _same(actual, expected)]


def prose_departures(config: RunConfig, method: Method) -> list[str]:
    """One sentence per setting where ``config`` follows the authors' released code against their paper's prose
    (the published numbers came from that code, so the paper presets follow it)."""
    return [f"{_setting(v, actual)} follows the {v.source}; not the paper's prose ({v.prose})"
            for _, v, actual, expected in _recipe(config, method) if v.prose is not None and _same(actual, expected)]


def deviations(config: RunConfig, method: Method) -> list[str]:
    """Every active deviation of ``config`` (training ``method``, as the composition root resolved it) from its
    method's paper: the :data:`RULES`, the departures from the paper's prose where the run follows the released
    code, then the recipe values."""
    run = Run(config, method)
    return ([rule.text(run) for rule in RULES if rule.applies(run)] + prose_departures(config, method)
            + recipe_deviations(config, method))
