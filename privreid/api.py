"""Top-level Python functions that take any ReID model (an adapter, an ``nn.Module`` or a model file)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from privreid.data.types import TestSet
from privreid.errors import python_errors
from privreid.evaluation.metric_registry import summary_keys
from privreid.evaluation.model_eval import evaluate_model
from privreid.models.adapter import ReIDAdapter
from privreid.models.external import as_adapter


@dataclass
class EvaluationResult:
    """:func:`evaluate`'s numbers: per test set name, rank-1/5/10, mAP, mINP (fractions) and the full record."""

    testsets: dict[str, dict[str, float]]
    records: dict[str, dict[str, Any]] = field(repr=False)
    model: dict[str, Any] | None = None  #: the model file's load report (``LoadReport.to_dict``), if any

    def to_dict(self) -> dict[str, Any]:
        return {"testsets": self.testsets, "records": self.records, "model": self.model}


def _testsets(data: Any, domains: str | list[str] | None = None) -> list[TestSet]:
    """``data`` as test sets: a TestSet, a list of them, or a ``--data`` value (a root, ``synth`` ...);
    ``domains`` (a list or a comma list) keeps those test sets, in that order (ConfigError naming an unknown one)."""
    if isinstance(data, TestSet):
        found = [data]
    elif isinstance(data, (list, tuple)) and all(isinstance(t, TestSet) for t in data):
        found = list(data)
    else:
        from privreid.data.catalog import resolve_datasets
        from privreid.data.partition import as_test_set

        found = [as_test_set(name, ds) for name, ds in resolve_datasets([str(data)]).items()]
    if domains is None:
        return found
    from privreid.errors import ConfigError

    wanted = [d.strip() for d in domains.split(",") if d.strip()] if isinstance(domains, str) else list(domains)
    by_name = {ts.name: ts for ts in found}
    unknown = [d for d in wanted if d not in by_name]
    if unknown or not wanted:
        raise ConfigError(f"unknown domain(s) {', '.join(unknown) or '(none given)'}; available: "
                          f"{', '.join(by_name)}")
    return [by_name[d] for d in wanted]


@python_errors()
def evaluate(model: Any, data: Any = "synth", *, height: int | None = None, width: int | None = None,
             domains: str | list[str] | None = None, flip: bool = False, metric: str = "euclidean",
             ap: str = "torchreid", single_gallery_shot: bool = False, mode: str | None = None,
             seq_len: int | None = None, interpolation: str | None = None, precision: str = "fp32",
             batch_size: int = 128, device: str = "cpu", progress: bool = False,
             **load_options: Any) -> EvaluationResult:
    """Score ``model`` on every test set of ``data`` with :func:`~privreid.evaluation.model_eval.evaluate_model`.

    ``model``: a :class:`~privreid.models.adapter.ReIDAdapter`, an ``nn.Module``
    (its output is the feature) or a model file
    (:func:`~privreid.models.external.load_any_model`; ``load_options`` go
    there: ``arch``, ``mean``, ``std``, ``client`` ...).  ``height`` / ``width``
    override the adapter's input size.  The keywords are ``privreid eval``'s
    options: ``domains`` (the test sets to score, default all), ``flip``,
    ``metric`` (``euclidean`` or ``cosine``), ``ap`` (``torchreid`` or
    ``devkit``), ``single_gallery_shot``, ``mode`` and ``seq_len``
    (visible-infrared and video data), ``interpolation`` (the test resize,
    ``bilinear`` or ``bicubic``; default: the file's project's, see the load
    report) and ``precision``; the same values give the same numbers.  Quiet
    unless ``progress``.
    """
    from privreid.evaluation.model_eval import IR_TO_VISIBLE, check_eval_options
    from privreid.precision import at_precision, check_precision

    given = {k: v for k, v in dict(height=height, width=width, interpolation=interpolation).items() if v is not None}
    adapter = as_adapter(model, **load_options, **given)  # a file's load report then says what was given
    height, width = height or adapter.height, width or adapter.width
    kinds = dict(mode=mode, seq_len=seq_len, single_gallery_shot=single_gallery_shot)
    check_eval_options([], **kinds)
    check_precision(precision, device)
    module = at_precision(adapter.as_module().to(device).eval(), precision, device)
    testsets = _testsets(data, domains)
    check_eval_options(testsets, **kinds)
    records = {ts.name: evaluate_model(module, ts, height=height, width=width, batch_size=batch_size,
                                       device=device, progress=progress, flip=flip, metric=metric, ap=ap,
                                       single_gallery_shot=single_gallery_shot, mode=mode or IR_TO_VISIBLE,
                                       seq_len=seq_len, interpolation=interpolation or adapter.interpolation)
               for ts in testsets}
    return EvaluationResult({name: {k: r[k] for k in summary_keys()} for name, r in records.items()}, records,
                            adapter.report.to_dict() if adapter.report else None)


def _network(model: Any, load_options: dict[str, Any], device: str,
             interpolation: str | None = None) -> tuple[ReIDAdapter, Any]:
    """``model`` as an adapter and the module privreid's pipelines run (ImageNet-normalised input), on ``device``;
    a file's test resize is ``interpolation`` when given (its load report says so)."""
    adapter = as_adapter(model, **load_options, **({"interpolation": interpolation} if interpolation else {}))
    return adapter, adapter.as_module().to(device).eval()


@dataclass
class AttackRow:
    """One (test set, attack) of :func:`attack`: clean and attacked R1 / mAP / mINP and the relative drops."""

    testset: str
    method: str
    clean: dict[str, float]
    attacked: dict[str, float]
    drop: dict[str, float]  #: (clean - attacked) / clean per metric


@dataclass
class AttackResult:
    """:func:`attack`'s numbers: the budget and one :class:`AttackRow` per test set and attack method."""

    eps: float
    alpha: float
    steps: int
    target: str
    rows: list[AttackRow]
    records: list[dict[str, Any]] = field(repr=False)  #: the flat rows ``privreid attack`` writes to results.csv

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@python_errors()
def attack(model: Any, data: Any = "synth", *, method: str | list[str] = "pgd", eps: float = 8 / 255,
           alpha: float | None = None, steps: int = 10, target: str = "query", max_queries: int | None = None,
           domains: str | list[str] | None = None, interpolation: str | None = None, precision: str = "fp32",
           batch_size: int = 32, seed: int = 0, device: str = "cpu", progress: bool = False,
           **load_options: Any) -> AttackResult:
    """Adversarial queries against ``model`` on every test set of ``data`` (``privreid attack``'s campaign).

    ``method``: ``fgsm``, ``pgd``, ``bim``, ``mifgsm``, ``tifgsm``, ``all`` or a
    list; ``eps`` the L_inf budget in ``[0, 1]`` pixels; ``alpha`` the step
    of the iterative attacks (default ``2.5 * eps / steps``: 2/255 at 8/255
    and 10 steps, as torchattacks); ``target``: ``query``, ``gallery`` or ``both``.  ``model``,
    ``load_options``, ``domains``, ``interpolation`` and ``precision`` as :func:`evaluate` (``privreid attack``'s
    options).
    """
    from privreid.retrieval_attacks.campaign import attack_models
    from privreid.retrieval_attacks.feature_attacks import check_budget, default_alpha
    from privreid.evaluation.metric_registry import headline
    from privreid.retrieval_attacks.retrieval import TARGETS, resolve_methods
    from privreid.errors import ConfigError

    check_budget(eps, alpha, steps)
    alpha = default_alpha(eps, steps) if alpha is None else alpha
    if target not in TARGETS:
        raise ConfigError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    from privreid.precision import at_precision, check_precision

    check_precision(precision, device)
    adapter, net = _network(model, load_options, device, interpolation)
    if not adapter.differentiable:
        raise ConfigError("attacks need gradients through the model; this one has none (an ONNX model: "
                          "privreid.evaluate and privreid.corrupt need no gradients)")
    net = at_precision(net, precision, device)
    records, _ = attack_models([("model", net, adapter.height, adapter.width, interpolation or adapter.interpolation)],
                               _testsets(data, domains),
                               methods=resolve_methods(method), eps=eps, alpha=alpha, steps=steps, target=target,
                               device=device, max_queries=max_queries, batch_size=batch_size, seed=seed,
                               progress=progress)
    keys = [key for key, _ in headline()]
    rows = [AttackRow(r["testset"], r["attack"], {k: r[f"clean_{k}"] for k in keys}, {k: r[k] for k in keys},
                      {k: r[f"drop_{k}"] for k in keys}) for r in records]
    return AttackResult(eps, alpha, steps, target, rows, records)


@dataclass
class CorruptionNumbers:
    """One test set under corruptions: clean metrics, and the mean and std over the repeats."""

    clean: dict[str, float]
    mean: dict[str, float]
    std: dict[str, float]


@dataclass
class CorruptionResult:
    """:func:`corrupt`'s numbers per test set, with the protocol's settings and its deviations."""

    testsets: dict[str, CorruptionNumbers]
    corruptions: list[str]
    severity: int | str
    repeats: int
    deviations: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@python_errors()
def corrupt(model: Any, data: Any = "synth", *, corruptions: str | list[str] = "all", severity: int | str = "random",
            side: str = "both", repeats: int = 10, seed: int = 0, pixel_scale: float | str = 1,
            domains: str | list[str] | None = None, flip: bool = False, metric: str = "euclidean",
            interpolation: str | None = None, batch_size: int = 128, device: str = "cpu", progress: bool = False,
            **load_options: Any) -> CorruptionResult:
    """R1 / mAP / mINP of ``model`` under CIL-ReID's corruption protocol (``privreid eval --corruption``).

    See :func:`privreid.evaluation.corrupted_eval.evaluate_corrupted` for the
    protocol; ``side`` is what is corrupted (``query``, ``gallery``, ``both``).
    Needs no gradients, so ONNX models work.  ``model``, ``load_options``, ``domains``, ``flip``, ``metric``
    and ``interpolation`` as :func:`evaluate`.
    """
    from privreid.evaluation.corrupted_eval import evaluate_corrupted

    adapter, net = _network(model, load_options, device, interpolation)
    results = {ts.name: evaluate_corrupted(net, ts, corruptions=corruptions, severity=severity, corrupt=side,
                                           repeats=repeats, seed=seed, pixel_scale=pixel_scale, progress=progress,
                                           height=adapter.height, width=adapter.width, batch_size=batch_size,
                                           device=device, flip=flip, metric=metric,
                                           interpolation=interpolation or adapter.interpolation)
               for ts in _testsets(data, domains)}
    first = next(iter(results.values()))
    return CorruptionResult({name: CorruptionNumbers({k: r["clean"][k] for k in summary_keys()}, r["mean"], r["std"])
                             for name, r in results.items()},
                            first["corruptions"], severity, repeats, first["deviations"])


@dataclass
class InversionResult:
    """:func:`invert`'s numbers: per subject and on average, the reconstruction's and a random image's
    MSE / PSNR / SSIM / feature cosine to the subject, and the inferred labels; the images themselves."""

    method: str
    iterations: int
    subjects: list[dict[str, Any]]
    summary: dict[str, Any]
    reconstructions: Any = field(repr=False)  #: ``(N, 3, H, W)`` tensor in ``[0, 1]``
    #: the attack and budget that produced the numbers (a lower bound on what leaks)
    recipe: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "iterations": self.iterations, "recipe": self.recipe,
                "subjects": self.subjects, "summary": self.summary}


@python_errors()
def invert(model: Any, images: Any, labels: list[int], *, method: str = "ig", iterations: int = 200,
           lr: float | None = None, options: dict[str, Any] | None = None, label_smoothing: float = 0.0,
           seed: int = 0, device: str = "cpu", progress: bool = False, **load_options: Any) -> InversionResult:
    """Reconstruct ``images`` from ``model``'s one-image training gradients (the ``full`` threat model).

    The attacker observes the whole gradient of the identity loss (classifier
    included) of one training step on each image with its ``labels`` entry:
    :mod:`privreid.inversion.threat_models`, as ``privreid invert
    --threat full``.  ``images``: ``(N, 3, H, W)`` in ``[0, 1]`` at the
    model's input size.  ``method``: ``dlg``, ``idlg``, ``ig``
    (:data:`privreid.INVERSION_ATTACKS`).  ``lr``: ``None`` = the recipe's.
    ``options``: any further field of
    :class:`privreid.inversion.InversionSettings` (the knobs of
    ``privreid invert``: ``optimizer``, ``signed``, ``schedule``, ``tv``,
    ``tv_form``, ``bn``, ``space``, ``start``, ``select``, ``restarts``,
    ``batch``: consecutive images form one step's batch, ``local_steps``,
    ``local_lr``, ``update``); the defaults are the strong recipe, and
    ``InversionSettings.preset("l2rw-fig8")``'s fields are L2RW+'s.
    Needs a classifier and gradients;
    the shared-update threat models need a privreid checkpoint's federation
    (``privreid invert``).  ``model`` and ``load_options`` as :func:`evaluate`.
    """
    import torch

    from privreid.inversion import InversionSettings, reconstruct_batch
    from privreid.inversion.report import score, summarise
    from privreid.errors import ConfigError
    from privreid.seeding import derive_seed

    settings = InversionSettings(**{"attack": method, "iterations": iterations, **({} if lr is None else {"lr": lr}),
                                    **(options or {})})
    adapter, net = _network(model, load_options, device)
    if not adapter.differentiable or adapter.classifier is None:
        raise ConfigError("inversion observes the gradient of the identity loss: the model needs gradients and a "
                          "classifier (privreid.evaluate, privreid.attack and privreid.audit's feature attack "
                          "need only features)")
    images = torch.as_tensor(images, dtype=torch.float32)
    if images.ndim != 4 or tuple(images.shape[1:]) != (3, adapter.height, adapter.width) or len(images) != len(labels):
        raise ConfigError(f"images must be (N, 3, {adapter.height}, {adapter.width}) with one label each; got "
                          f"{tuple(images.shape)} and {len(labels)} label(s)")
    b = settings.batch
    if len(images) % b:
        raise ConfigError(f"{len(images)} image(s) do not split into batches of {b}")
    recs = [rec for k in range(0, len(images), b)
            for rec in reconstruct_batch(net, images[k:k + b], [int(y) for y in labels[k:k + b]], threat="full",
                                         shared=set(), settings=settings, label_smoothing=label_smoothing,
                                         seed=derive_seed(seed, "invert", str(k)), progress=progress)]
    scores = [score(net, rec) for rec in recs]
    return InversionResult(method, iterations, scores, summarise(scores),
                           torch.stack([rec.reconstruction for rec in recs]), settings.describe())


@dataclass
class AuditResult:
    """:func:`audit`'s numbers: how well ``attack`` tells members from non-members (AUC, TPR at low FPR,
    best balanced accuracy, bootstrap intervals), with the statistic it scored."""

    attack: str
    statistic: str
    auc: float
    tpr_at_fpr: dict[str, float]
    balanced_accuracy: float
    members: int
    nonmembers: int
    record: dict[str, Any] = field(repr=False)  #: :func:`privreid.auditing.metrics.summarise`'s whole record

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@python_errors()
def audit(model: Any, members: list[tuple], nonmembers: list[tuple], *, level: str = "image",
          attack: str = "feature", bootstrap: int = 200, seed: int = 0, batch_size: int = 128, device: str = "cpu",
          **load_options: Any) -> AuditResult:
    """Membership inference against ``model``: were these images (``level="image"``) or these people
    (``level="identity"``) in its training set?

    ``members`` / ``nonmembers``: ``(image path, identity, ...)`` samples (an
    :class:`~privreid.data.ImageDataset`'s samples work); at identity level
    the images of one identity are one candidate, and an identity must not be
    on both sides.  ``attack``: ``feature`` (image level: the prototype
    margin, how much closer an image is to its identity's other images than
    to any other identity; identity level: compactness minus the nearest
    other identity's similarity) or ``loss`` (the classifier's
    log-likelihood; a model without a classifier is refused: use
    ``feature``): :mod:`privreid.auditing.membership_attacks`.  LiRA needs shadow models
    trained like the target, which only ``privreid audit`` on privreid
    checkpoints can train.  ``model`` and ``load_options`` as :func:`evaluate`.
    """
    from privreid.auditing.given import audit_given

    adapter, net = _network(model, load_options, device)
    scored = audit_given(net, (adapter.height, adapter.width), members, nonmembers, level=level, attack=attack,
                         bootstrap=bootstrap, seed=seed, batch_size=batch_size, device=device)
    record = scored.record
    return AuditResult(attack, scored.statistic, record["auc"], record["tpr_at_fpr"], record["balanced_accuracy"],
                       record["members"], record["nonmembers"], record)


@dataclass
class ComparisonResult:
    """:func:`compare`'s numbers: the clean table's rows (seen / unseen R1, mAP, mINP per model), the suites'
    records, and the report folder when one was written."""

    clean: list[dict[str, Any]]
    attacks: list[dict[str, Any]] = field(default_factory=list)
    corruptions: list[dict[str, Any]] = field(default_factory=list)
    report: str | None = None  #: ``out/report.md``

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@python_errors()
def compare(models: list[Any], data: Any = None, *, suites: list[str] | tuple[str, ...] = ("clean",),
            out: Any = None, untrained: bool = True, device: str = "cpu", progress: bool = False,
            arch: str | None = None, height: int | None = None, width: int | None = None,
            mean: list[float] | None = None, std: list[float] | None = None, interpolation: str | None = None,
            **suite_options: Any) -> ComparisonResult:
    """Several models on the same test sets: ``privreid compare``, for privreid checkpoints, model files
    from elsewhere and models in memory (adapters, ``nn.Module``) side by side.

    ``data``: a ``--data`` value (or a list of them); default: the first
    privreid checkpoint's data.  ``suites`` other than ``clean``
    (``attacks``, ``corruptions``; ``inversion`` and ``audit`` need privreid
    checkpoints) write a report into ``out``, with ``suite_options`` the
    fields of :class:`privreid.reporting.suite.SuiteSettings` (``attacks``,
    ``steps``, ``max_queries``, ``corruptions``, ``corruption_repeats`` ...).
    Nothing is written without ``out``.  ``arch``, ``height``, ``width``,
    ``mean``, ``std`` and ``interpolation`` say how to read model files from
    elsewhere, as ``privreid compare``'s options of those names.
    """
    from pathlib import Path

    from privreid.comparison import compare_checkpoints
    from privreid.errors import ConfigError
    from privreid.models.evaluated import load_evaluated_models

    roots = None if data is None else [str(d) for d in (data if isinstance(data, (list, tuple)) else [data])]
    loaded = load_evaluated_models(list(models), arch=arch, height=height, width=width, mean=mean, std=std,
                                   interpolation=interpolation)
    paths = [m.path for m in loaded]
    if list(suites) == ["clean"] and out is None:
        return ComparisonResult(compare_checkpoints(paths, untrained=untrained, device=device, data=roots,
                                                    models=loaded))
    if out is None:
        raise ConfigError(f"the {', '.join(s for s in suites if s != 'clean')} suite(s) write a report: give out=")
    from privreid.reporting.suite import SuiteSettings, run_suite

    result = run_suite(paths, out, SuiteSettings(suites=list(suites), **suite_options), device=device,
                       progress=progress, data=roots, models=loaded)
    return ComparisonResult(result["clean"], result["attacks"], result["corruptions"], str(Path(out) / "report.md"))
