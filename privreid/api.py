"""The front door: top-level Python functions that take any ReID model (an adapter, an ``nn.Module`` or a model
file), and the functions the commands call (``privreid eval``, ``attack``, ``compare``, ``invert``, ``audit``,
``export``, ``corrupt``, ``data``), whose keywords are the commands' options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privreid.errors import ConfigError, python_errors

if TYPE_CHECKING:  # the commands import this module before any of their checks: torch and scipy load later
    from privreid.models.adapter import ReIDAdapter


@dataclass
class EvaluationResult:
    """:func:`evaluate`'s numbers: per test set name, rank-1/5/10, mAP, mINP (fractions) and the full record."""

    testsets: dict[str, dict[str, float]]
    records: dict[str, dict[str, Any]] = field(repr=False)
    model: dict[str, Any] | None = None  #: the model file's load report (``LoadReport.to_dict``), if any
    compile_seconds: float | None = None  #: with ``compile``: the seconds spent compiling

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@python_errors()
def evaluate(model: Any, data: Any = "synth", *, height: int | None = None, width: int | None = None,
             domains: str | list[str] | None = None, flip: bool = False, metric: str = "euclidean",
             ap: str = "torchreid", single_gallery_shot: bool = False, mode: str | None = None,
             seq_len: int | None = None, interpolation: str | None = None, precision: str = "fp32",
             compile: bool = False, batch_size: int = 128, device: str = "cpu", progress: bool = False,
             **load_options: Any) -> EvaluationResult:
    """Score ``model`` on every test set of ``data`` with :func:`~privreid.evaluation.model_eval.evaluate_model`.

    ``model``: a :class:`~privreid.models.adapter.ReIDAdapter`, an ``nn.Module`` (its output is the feature) or a
    model file (:func:`~privreid.models.external.load_any_model`, which gets ``load_options``: ``arch``, ``mean``,
    ``std``, ``client`` ...).  ``height`` / ``width`` override the adapter's input size.  The keywords are
    ``privreid eval``'s options: ``domains`` (default all), ``flip``, ``metric`` (``euclidean`` or ``cosine``),
    ``ap`` (``torchreid`` or ``devkit``), ``single_gallery_shot``, ``mode`` and ``seq_len`` (visible-infrared and
    video data), ``interpolation`` (``bilinear`` or ``bicubic``; default: the file's project's, see the load
    report), ``precision`` and ``compile`` (:mod:`privreid.models.compilation`; the result's ``compile_seconds``).
    Quiet unless ``progress``."""
    from privreid.evaluation.metric_registry import summary_keys
    from privreid.evaluation.model_eval import IR_TO_VISIBLE, check_eval_options, evaluate_model, resolve_testsets
    from privreid.models.compilation import CompileClock

    given = {k: v for k, v in dict(height=height, width=width).items() if v is not None}  # the load report says so
    adapter, module = _network(model, {**load_options, **given}, device, interpolation, precision=precision,
                               compile=compile)
    height, width = height or adapter.height, width or adapter.width
    kinds = dict(mode=mode, seq_len=seq_len, single_gallery_shot=single_gallery_shot)
    check_eval_options([], **kinds)
    testsets = resolve_testsets(data, domains)
    check_eval_options(testsets, **kinds)
    with CompileClock() as clock:
        records = {ts.name: evaluate_model(module, ts, height=height, width=width, batch_size=batch_size,
                                           device=device, progress=progress, flip=flip, metric=metric, ap=ap,
                                           single_gallery_shot=single_gallery_shot, mode=mode or IR_TO_VISIBLE,
                                           seq_len=seq_len, interpolation=interpolation or adapter.interpolation)
                   for ts in testsets}
    return EvaluationResult({name: {k: r[k] for k in summary_keys()} for name, r in records.items()}, records,
                            adapter.report.to_dict() if adapter.report else None,
                            clock.seconds if compile else None)


def _network(model: Any, load_options: dict[str, Any], device: str, interpolation: str | None = None, *,
             precision: str = "fp32", compile: bool = False) -> tuple[ReIDAdapter, Any]:
    """``model`` as an adapter and the module privreid's pipelines run (ImageNet-normalised input), on ``device``,
    compiled with ``compile`` (:mod:`privreid.models.compilation`), at ``precision`` (:mod:`privreid.precision`);
    a file's test resize is ``interpolation`` when given (its load report says so)."""
    from privreid.models.compilation import compile_if
    from privreid.models.external import as_adapter
    from privreid.precision import at_precision, check_precision

    check_precision(precision, device)
    adapter = as_adapter(model, **load_options, **({"interpolation": interpolation} if interpolation else {}))
    return adapter, at_precision(compile_if(adapter.as_module().to(device).eval(), compile, device), precision, device)


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
    compile_seconds: float | None = None  #: with ``compile``: the seconds spent compiling

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@python_errors()
def attack(model: Any, data: Any = "synth", *, method: str | list[str] = "pgd", eps: float = 8 / 255,
           alpha: float | None = None, steps: int = 10, target: str = "query", max_queries: int | None = None,
           domains: str | list[str] | None = None, interpolation: str | None = None, precision: str = "fp32",
           compile: bool = False, batch_size: int = 32, seed: int = 0, device: str = "cpu", progress: bool = False,
           **load_options: Any) -> AttackResult:
    """Adversarial queries against ``model`` on every test set of ``data`` (``privreid attack``'s campaign).

    ``method``: ``fgsm``, ``pgd``, ``bim``, ``mifgsm``, ``tifgsm``, ``all`` or a list; ``eps`` the L_inf budget in
    ``[0, 1]`` pixels; ``alpha`` the iterative attacks' step (default ``2.5 * eps / steps``: 2/255 at 8/255 and 10
    steps, as torchattacks); ``target``: ``query``, ``gallery`` or ``both``.  The rest as :func:`evaluate`."""
    from privreid.evaluation.metric_registry import headline
    from privreid.evaluation.model_eval import resolve_testsets
    from privreid.models.compilation import CompileClock
    from privreid.retrieval_attacks.campaign import attack_models

    settings = attack_settings(method=method, eps=eps, alpha=alpha, steps=steps, target=target)
    adapter, net = _network(model, load_options, device, interpolation, precision=precision, compile=compile)
    if not adapter.differentiable:
        raise ConfigError("attacks need gradients through the model; this one has none (an ONNX model: "
                          "privreid.evaluate and privreid.corrupt need no gradients)")
    with CompileClock() as clock:
        records, _ = attack_models([("model", net, adapter.height, adapter.width,
                                     interpolation or adapter.interpolation)], resolve_testsets(data, domains),
                                   methods=settings["methods"], eps=eps, alpha=settings["alpha"], steps=steps,
                                   target=target, device=device, max_queries=max_queries, batch_size=batch_size,
                                   seed=seed, progress=progress)
    keys = [key for key, _ in headline()]
    rows = [AttackRow(r["testset"], r["attack"], {k: r[f"clean_{k}"] for k in keys}, {k: r[k] for k in keys},
                      {k: r[f"drop_{k}"] for k in keys}) for r in records]
    return AttackResult(eps, settings["alpha"], steps, target, rows, records, clock.seconds if compile else None)


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

    Protocol: :func:`privreid.evaluation.corrupted_eval.evaluate_corrupted`; ``side`` is what is corrupted
    (``query``, ``gallery``, ``both``).  Needs no gradients, so ONNX models work.  The rest as :func:`evaluate`."""
    from privreid.evaluation.corrupted_eval import evaluate_corrupted
    from privreid.evaluation.metric_registry import summary_keys
    from privreid.evaluation.model_eval import resolve_testsets

    adapter, net = _network(model, load_options, device, interpolation)
    results = {ts.name: evaluate_corrupted(net, ts, corruptions=corruptions, severity=severity, corrupt=side,
                                           repeats=repeats, seed=seed, pixel_scale=pixel_scale, progress=progress,
                                           height=adapter.height, width=adapter.width, batch_size=batch_size,
                                           device=device, flip=flip, metric=metric,
                                           interpolation=interpolation or adapter.interpolation)
               for ts in resolve_testsets(data, domains)}
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

    The attacker observes the whole gradient of the identity loss (classifier included) of one training step on
    each image with its ``labels`` entry (:mod:`privreid.inversion.threat_models`; ``privreid invert --threat
    full``).  ``images``: ``(N, 3, H, W)`` in ``[0, 1]`` at the model's input size.  ``method``: ``dlg``, ``idlg``,
    ``ig`` (:data:`privreid.INVERSION_ATTACKS`).  ``lr``: ``None`` = the recipe's.  ``options``: any further field
    of :class:`privreid.inversion.InversionSettings` (``optimizer``, ``signed``, ``schedule``, ``tv``, ``tv_form``,
    ``bn``, ``space``, ``start``, ``select``, ``restarts``, ``batch``: consecutive images form one step's batch,
    ``local_steps``, ``local_lr``, ``update``); the defaults are the strong recipe, and
    ``InversionSettings.preset("l2rw-fig8")``'s fields are L2RW+'s.  Needs a classifier and gradients; the
    shared-update threat models need a privreid checkpoint's federation (``privreid invert``).  ``model`` and
    ``load_options`` as :func:`evaluate`."""
    import torch

    from privreid.inversion import InversionSettings, reconstruct_batch
    from privreid.inversion.report import score, summarise
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

    ``members`` / ``nonmembers``: ``(image path, identity, ...)`` samples (an :class:`~privreid.data.ImageDataset`'s
    samples work); at identity level the images of one identity are one candidate, and an identity must not be on
    both sides.  ``attack`` (:mod:`privreid.auditing.membership_attacks`): ``feature`` (image level: the prototype
    margin, how much closer an image is to its identity's other images than to any other identity; identity level:
    compactness minus the nearest other identity's similarity) or ``loss`` (the classifier's log-likelihood; a model
    without a classifier is refused).  LiRA needs shadow models trained like the target, which only ``privreid
    audit`` on privreid checkpoints can train.  ``model`` and ``load_options`` as :func:`evaluate`."""
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
            announce=None, **suite_options: Any) -> ComparisonResult:
    """Several models on the same test sets: ``privreid compare``, for privreid checkpoints, model files
    from elsewhere and models in memory (adapters, ``nn.Module``) side by side.

    ``data``: a ``--data`` value (or a list of them); default: the first privreid checkpoint's data.  ``suites``
    other than ``clean`` (``attacks``, ``corruptions``; ``inversion`` and ``audit`` need privreid checkpoints) write
    a report into ``out`` (and the models' provenance, ``models.json``), with ``suite_options`` the fields of
    :class:`privreid.comparison.SuiteSettings` (``attacks``, ``steps``, ``max_queries``, ``corruptions``,
    ``corruption_repeats`` ...); nothing is written without ``out``.  ``arch``, ``height``, ``width``, ``mean``,
    ``std`` and ``interpolation`` read model files from elsewhere, as ``privreid compare``'s options;
    ``announce(line)`` gets each such file's load line."""
    from privreid.comparison import compare_checkpoints

    roots = None if data is None else [str(d) for d in (data if isinstance(data, (list, tuple)) else [data])]
    loaded = load_models(list(models), arch=arch, height=height, width=width, mean=mean, std=std,
                         interpolation=interpolation, announce=announce)
    paths = [m.path for m in loaded]
    if list(suites) == ["clean"] and out is None:
        return ComparisonResult(compare_checkpoints(paths, untrained=untrained, device=device, data=roots,
                                                    models=loaded))
    if out is None:
        raise ConfigError(f"the {', '.join(s for s in suites if s != 'clean')} suite(s) write a report: give out=")
    from privreid.comparison import SuiteSettings
    from privreid.provenance import record_models

    result = run_suite(paths, out, SuiteSettings(suites=list(suites), **suite_options), device=device,
                       progress=progress, data=roots, models=loaded)
    record_models(Path(out), loaded)
    return ComparisonResult(result["clean"], result["attacks"], result["corruptions"], str(Path(out) / "report.md"))


def run_suite(paths: list[Any], out: Any, settings: Any = None, *, device: str = "auto", progress: bool = False,
              data: list[str] | None = None, models: list | None = None, **file_options: Any) -> dict[str, Any]:
    """``privreid compare --suite``: run the selected evaluations on every model
    (:func:`privreid.comparison.run_suites`, ``settings`` a :class:`privreid.comparison.SuiteSettings`) and write
    their report into ``out`` (:mod:`privreid.reporting.suite`).  Returns ``{"clean": rows, "attacks": records,
    "corruptions": records, "inversion": {...}, "audit": records, "poisoning": records, "deviations": [...],
    "files": [...]}`` (absent suites are empty)."""
    from privreid.comparison import SuiteSettings, run_suites
    from privreid.reporting.suite import write_report

    settings = settings or SuiteSettings()
    run = run_suites(paths, out, settings, device=device, progress=progress, data=data, models=models,
                     **file_options)
    return write_report(run, out, settings, data=data)


def _csv(value: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None`` or empty -> ``[]``."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _channels(value: Any, option: str) -> list[float] | None:
    """``"0.5,0.5,0.5"`` (or three numbers) -> three floats; ConfigError naming ``option`` otherwise."""
    if value is None or not isinstance(value, str):
        return value
    try:
        values = [float(v) for v in value.split(",")]
    except ValueError:
        values = []
    if len(values) != 3:
        raise ConfigError(f"{option} takes three comma-separated numbers (R,G,B), got {value!r}")
    return values


def load_models(paths: list[Any], *, mean: Any = None, std: Any = None, announce=None, **file_options: Any) -> list:
    """The models of ``paths`` (:func:`privreid.models.evaluated.load_evaluated_models`; ``mean`` / ``std`` as
    three numbers or ``"R,G,B"``), each file from elsewhere announced by its one load line (``announce(line)``)."""
    from privreid.models.evaluated import load_evaluated_models

    channels = {"mean": _channels(mean, "--mean"), "std": _channels(std, "--std")}
    models = load_evaluated_models(paths, **file_options, **channels)
    for model in models:
        if model.load_line() and announce is not None:
            announce(model.load_line())
    return models


def parse_pixel_scale(value: float | str) -> float | str:
    """``"auto"`` or a positive number (also from a command-line string)."""
    if value == "auto":
        return value
    try:
        scale = float(value)
    except ValueError:
        raise ConfigError(f"--pixel-scale must be 'auto' or a positive number, got {value!r}") from None
    if not scale > 0:
        raise ConfigError(f"--pixel-scale must be 'auto' or a positive number, got {value!r}")
    return scale


@python_errors()
def evaluate_checkpoint(model: Any, data: list[str] | None = None, *, fmt: str = "auto",
                        domains: str | None = None, client: str | None = None, flip: bool = False,
                        metric: str = "euclidean", ap: str = "torchreid", single_gallery_shot: bool = False,
                        mode: str | None = None, seq_len: int | None = None, device: str = "auto",
                        precision: str = "fp32", compile: bool = False, json_out: Any = None, splits: Any = None,
                        num_splits: int = 10,
                        corruption: str | None = None, severity: int | str = "random", corrupt: str = "both",
                        repeats: int = 10, seed: int = 0, pixel_scale: float | str = 1, announce=None,
                        **file_options: Any) -> list[dict[str, Any]]:
    """``privreid eval``: a checkpoint (its global or ``client``'s model) or a model file from elsewhere on the
    query/gallery split of each dataset of ``data`` (default: the checkpoint's), clean or under ``corruption``
    (CIL-ReID's protocol); the small DG benchmarks (``fmt``) under their own protocol, their splits written next
    to ``json_out``.  The keywords are the command's options; one record per test set (what ``--json`` holds).
    ``compile`` compiles the network (:mod:`privreid.models.compilation`)."""
    from privreid.corruptions import resolve_corruptions
    from privreid.device import resolve_device
    from privreid.evaluation.backdoor import evaluate_backdoor
    from privreid.evaluation.corrupted_eval import check_corruption_options, evaluate_testset
    from privreid.evaluation.dg_protocol import evaluate_dg_model, is_dg_eval_format
    from privreid.evaluation.model_eval import check_eval_options, resolve_testsets
    from privreid.malicious_clients.backdoor import recorded_backdoor
    from privreid.models.evaluated import data_source
    from privreid.models.compilation import compile_if
    from privreid.precision import at_precision, check_precision

    dg = is_dg_eval_format(fmt)  # each --data root ranked under its small-benchmark protocol
    corrupted = None
    if dg:
        if not data:
            raise ConfigError(f"--format {fmt} needs --data ROOT (the dataset's root folder)")
        if corruption is not None or mode is not None or seq_len is not None or single_gallery_shot:
            raise ConfigError(f"--format {fmt} is ranked under its own protocol; --corruption, --mode, --seq-len "
                              "and --single-gallery-shot do not apply")
        if num_splits < 1 or seed < 0:
            raise ConfigError("--num-splits must be at least 1 and --seed non-negative")
    elif splits is not None:  # never silently ignored
        raise ConfigError(f"--splits reuses the splits of a small DG benchmark (--format viper, grid ...); "
                          f"--format {fmt} has none")
    elif corruption is not None:
        if severity != "random" and not (str(severity).isascii() and str(severity).isdigit()):  # not superscripts
            raise ConfigError(f"--severity must be an integer from 1 to 5 or 'random', got {severity!r}")
        options = dict(severity=severity if severity == "random" else int(severity), corrupt=corrupt,
                       repeats=repeats, seed=seed, pixel_scale=parse_pixel_scale(pixel_scale))
        check_corruption_options(**options)
        corrupted = dict(corruptions=resolve_corruptions(_csv(corruption)), **options)
    kinds = dict(mode=mode, seq_len=seq_len, corrupted=corruption is not None, single_gallery_shot=single_gallery_shot)
    check_eval_options([], **kinds)  # passes for the small DG benchmarks, which refuse these options above
    dev = resolve_device(device)
    check_precision(precision, dev)
    [loaded] = load_models([model], announce=announce, **file_options)
    net = at_precision(compile_if(loaded.network(client, device=dev), compile, dev), precision, dev)
    height, width = loaded.input_size
    rows = []
    if dg:
        for root in data:
            name = Path(root).name
            written = Path(json_out).with_name(f"{Path(json_out).stem}-{name}-splits.json") if json_out else None
            result = evaluate_dg_model(net, root, fmt, height=height, width=width, device=dev, flip=flip,
                                       metric=metric, ap=ap, num_splits=num_splits, seed=seed, splits_file=splits,
                                       write_splits_to=written, interpolation=loaded.interpolation)
            rows.append({"testset": f"{name} ({result['protocol']})", **result})
        return rows
    source = data_source([loaded], data)
    backdoor = recorded_backdoor(loaded.checkpoint.run_config) if loaded.checkpoint is not None else None
    testsets = resolve_testsets(data or source.roots, _csv(domains) or None, fmt=fmt if data else source.format,
                                verify=True)
    check_eval_options(testsets, **kinds)
    for testset in testsets:
        rows.append(evaluate_testset(net, testset, corrupted=corrupted, mode=mode, seq_len=seq_len, height=height,
                                     width=width, device=dev, flip=flip, metric=metric, ap=ap,
                                     single_gallery_shot=single_gallery_shot, interpolation=loaded.interpolation,
                                     progress=True))
        if backdoor is not None and corrupted is None:  # the run's trigger on every query
            measured = evaluate_backdoor(net, testset, backdoor, height=height, width=width, device=dev, flip=flip,
                                         metric=metric)
            rows[-1].update({"backdoor": {"trigger": backdoor.describe(), **measured}} if measured else {})
    return rows


@python_errors()
def export_checkpoint(model: Any, out: Any, *, fmt: str = "state-dict", client: str | None = None,
                      overwrite: bool = False) -> dict[str, Any]:
    """``privreid export``: a checkpoint's global (or ``client``'s) model written to the file ``out`` as ``fmt``
    (:mod:`privreid.export`); returns the export's report (path, input, feature size ...)."""
    from privreid.checkpoint import Checkpoint
    from privreid.export import check_format, export_model
    from privreid.rundir import check_not_a_run_file

    check_format(fmt)
    out = Path(out)
    check_not_a_run_file(out, source=model)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; give a file name")
    if out.exists() and not overwrite:
        raise ConfigError(f"--out {out} exists; pass --overwrite to replace it")
    if not out.parent.is_dir():
        raise ConfigError(f"the directory of --out does not exist: {out.parent}")
    ckpt = Checkpoint.load(model)
    cfg = ckpt.run_config
    source = {"checkpoint": str(model), "method": ckpt.method, "round": ckpt.round,
              "model": "global" if client is None else f"client {client}"}
    return export_model(ckpt.load_model(client), fmt, out, height=cfg.data.height, width=cfg.data.width,
                        source=source)


@python_errors()
def preview_corruptions(image: Any, out: Any, *, names: str | list[str] = "all", severities: list[int] | None = None,
                        size: tuple[int, int] | None = None, pixel_scale: float | str = 1, seed: int = 0,
                        progress: bool = False) -> list[str]:
    """``privreid corrupt``: ``image`` under each corruption of ``names`` (rows; families allowed) at each of
    ``severities`` (columns, default 1-5) beside the clean image, as the grid ``out``
    (:func:`privreid.corruptions.preview.save_preview`); ``size`` (H, W) resizes first. Returns the rows."""
    from torchvision.transforms.functional import pil_to_tensor, resize

    from privreid.config import MAX_IMAGE_SIDE, too_large_image
    from privreid.corruptions import SEVERITIES, check_severity, resolve_corruptions
    from privreid.corruptions.preview import save_preview
    from privreid.data.formats import read_image
    from privreid.rundir import check_output_file

    check_output_file(Path(out), "--out", create_parents=True)  # save_preview creates them
    if seed < 0:
        raise ConfigError(f"--seed must be non-negative, got {seed}")
    scale = parse_pixel_scale(pixel_scale)
    levels = list(SEVERITIES) if severities is None else severities
    for level in levels:
        check_severity(level)
    rows = resolve_corruptions(_csv(names) if isinstance(names, str) else names)
    if size is not None:  # checked before the image is read or anything is allocated
        h, w = size
        if h < 2 or w < 2:
            raise ConfigError(f"--size must be at least 2x2, got '{h}x{w}'")
        if max(h, w) > MAX_IMAGE_SIDE:
            raise ConfigError(f"--size {h}x{w}: {too_large_image(h, w)}")
    if not Path(image).is_file():
        raise ConfigError(f"image not found: {image}")
    picture = pil_to_tensor(read_image(Path(image))).float().div(255)
    if size is not None:
        picture = resize(picture, [h, w], antialias=True).clamp(0, 1)
    return save_preview(picture, Path(out), names=rows, severities=levels, seed=seed, pixel_scale=scale,
                        progress=progress)


@python_errors()
def synthesize(out: Any, *, seed: int = 0, domains: int | None = None, height: int | None = None,
               width: int | None = None, vi: bool = False, video: bool = False, overwrite: bool = False,
               progress: bool = False) -> Path:
    """``privreid data synth``: the synthetic dataset written into ``out``
    (:func:`privreid.data.synthetic.generate_synthetic`, or with ``vi`` / ``video`` the visible-infrared one of
    :mod:`privreid.data.synthetic_vi`; ``domains`` counts its entities); ``None`` keeps the generator's default."""
    import dataclasses

    from privreid.data.synthetic import SynthConfig, generate_synthetic
    from privreid.data.synthetic_vi import SynthVIConfig, generate_synthetic_vi
    from privreid.rundir import check_output_dir

    count = "num_entities" if vi or video else "num_domains"
    changes = {k: v for k, v in {"seed": seed, count: domains, "height": height, "width": width}.items()
               if v is not None}
    if vi or video:
        config, generate = dataclasses.replace(SynthVIConfig(video=video), **changes), generate_synthetic_vi
    else:
        config, generate = dataclasses.replace(SynthConfig(), **changes), generate_synthetic
    check_output_dir(Path(out))
    return generate(Path(out), config, progress=progress, overwrite=overwrite)


@python_errors()
def dataset_info(roots: list[str], *, fmt: str = "auto") -> list[dict[str, Any]]:
    """``privreid data info``: per dataset of ``roots`` (:func:`privreid.data.catalog.load_datasets`), its name,
    format, ``dataset`` and the ``notes`` on counts that differ from FedPav's Table 1 (paper 004)."""
    from privreid.data.catalog import load_datasets, verify_datasets
    from privreid.data.published_counts import check_counts

    loaded = load_datasets(roots, fmt)
    verify_datasets({name: item.dataset for name, item in loaded.items()})
    return [{"name": name, "format": item.format, "dataset": item.dataset,
             "notes": check_counts(item.format, item.dataset)} for name, item in loaded.items()]


def dataset_formats() -> list[dict[str, Any]]:
    """``privreid data formats``: each dataset format's spellings, layout and origin (built-in or a plugin)."""
    from privreid.data.formats import FORMATS, available_formats
    from privreid.plugins import listed_origin

    return [{"spellings": fmt.spellings, "layout": fmt.layout, "origin": listed_origin(FORMATS.origin(fmt.name))}
            for fmt in available_formats().values()]


@python_errors()
def invert_run(paths: list[Any], out: Any, settings: Any, threat: str, *, client: str | None = None,
               index: int | None = None, image: Any = None, label: int | None = None, data: Any = None, n: int = 1,
               clients: Any = None, defended: bool = False, seed: int = 0, device: str = "auto", announce=None,
               **file_options: Any) -> Any:
    """``privreid invert``: the inversion campaign of ``threat`` (``--threat``) against privreid checkpoints'
    clients (:func:`privreid.inversion.campaign.invert_checkpoints`), or against model files from elsewhere under
    the ``full`` threat (:func:`privreid.inversion.campaign.invert_files`), written into ``out``; ``settings`` an
    :class:`~privreid.inversion.InversionSettings`.  Returns the campaign's result (its ``table``)."""
    from privreid.provenance import record_models

    loaded = load_models(paths, announce=announce, **file_options)
    from_files = [m for m in loaded if m.checkpoint is None]
    if not from_files:
        from privreid.inversion.campaign import invert_checkpoints

        return invert_checkpoints(paths, out, settings=settings, threat=threat, client=client, index=index, image=image,
                                  label=label, n=n, clients=clients, defended=defended, seed=seed, device=device)
    if len(from_files) != len(loaded):
        raise ConfigError("privreid invert attacks privreid checkpoints' clients or model files from "
                          "elsewhere, not both in one run")
    if threat != "full":
        raise ConfigError(f"--threat {threat} observes a federated client's shared update, which only a "
                          "privreid checkpoint has; a model file from elsewhere is attacked under --threat full")
    for m in from_files:
        m.require("gradients", "privreid invert", "privreid eval and eval --corruption need no gradients")
        m.require("classifier", "privreid invert",
                  "the client's training step is its identity loss; privreid attack and the feature "
                  "attack of privreid audit need only features")
    from privreid.inversion.campaign import invert_files

    result = invert_files(loaded, out, settings=settings, image=image, label=label, data=data, index=index, n=n,
                          seed=seed, device=device)
    record_models(out, loaded)
    return result


@python_errors()
def audit_run(paths: list[Any], out: Any, *, level: str | None = None, method: str = "loss,feature",
              view: str = "public", client: str | None = None, round_: int | None = None, shadows: int = 4,
              probes_per_identity: int = 4, max_per_class: int | None = None, extra_per_cam: int | None = None,
              bootstrap: int = 200, dp_audit: bool = False, canaries: int = 40, confidence: float = 0.95,
              canary_norm: float = 1000.0, seed: int = 0, device: str = "auto", data: list[str] | None = None,
              echo=None, announce=None, **file_options: Any) -> list[dict[str, Any]]:
    """``privreid audit``: membership inference against privreid checkpoints (:func:`privreid.auditing.run_audit`)
    or model files from elsewhere trained on ``data`` (:func:`privreid.auditing.given.audit_files`), or with
    ``dp_audit`` the empirical DP audit (:func:`privreid.auditing.dp_audit.run_dp_audit`), written into ``out``;
    the keywords are the command's options (comma lists as strings).  Returns the audit's records."""
    from privreid.auditing import AuditSettings, run_audit
    from privreid.device import resolve_device
    from privreid.models.evaluated import model_labels
    from privreid.provenance import record_models

    echo = echo or (lambda _: None)
    loaded = load_models(paths, announce=announce, **file_options)
    if any(m.checkpoint is None for m in loaded):  # model files from elsewhere
        from privreid.auditing.given import GIVEN_ATTACKS, audit_files

        names = _csv(method)
        if len(loaded) != sum(m.checkpoint is None for m in loaded):
            raise ConfigError("privreid audit takes privreid checkpoints or model files from elsewhere, not both "
                              "in one run")
        if dp_audit or view != "public" or client or round_ is not None or level not in (None, "identity"):
            raise ConfigError("a model file from elsewhere is audited at --level identity, --view public: the "
                              "image level, the server views and the DP audit need a privreid run")
        if not data:
            raise ConfigError("a model file from elsewhere records no training data: give --data, the data it "
                              "was trained on (its training identities are the members)")
        unknown = [a for a in names if a not in GIVEN_ATTACKS]
        if unknown:
            raise ConfigError(f"--method {','.join(unknown)}: a model file from elsewhere is audited with "
                              f"{' or '.join(GIVEN_ATTACKS)} (LiRA trains shadow models like a privreid run)")
        for m in loaded:
            if "loss" in names:
                m.require("classifier", "the loss attack", "use --method feature, which needs only features")
        records = audit_files(loaded, model_labels(loaded), data, out, attacks=names, bootstrap=bootstrap, seed=seed,
                              device=resolve_device(device))
        record_models(out, loaded)
        return records
    if data:
        raise ConfigError("--data names the training data of a model file from elsewhere; a privreid "
                          "checkpoint records its own")
    if not dp_audit:
        settings = AuditSettings(levels=_csv(level or "image,identity"), attacks=_csv(method), views=_csv(view),
                                 client=client, round=round_, shadows=shadows,
                                 probes_per_identity=probes_per_identity, max_per_class=max_per_class,
                                 extra_per_cam=extra_per_cam, bootstrap=bootstrap, seed=seed)
        return run_audit(paths, out, settings, device=device, progress=False, echo=echo)["records"]
    from privreid.auditing.dp_audit import DPAuditSettings, run_dp_audit
    from privreid.auditing.report import write_report

    dp_settings = DPAuditSettings(canaries=canaries, confidence=confidence, canary_norm=canary_norm,
                                  seed=seed).validate()
    runs = [(label, m.checkpoint.run_config) for label, m in zip(model_labels(loaded), loaded)]
    for label, cfg in runs:
        if not (cfg.privacy.dp_sgd or cfg.privacy.client_dp):
            raise ConfigError(f"{label}: the DP audit needs a run trained with --dp-sgd or --client-dp")
    records = []
    for i, (label, cfg) in enumerate(runs):
        echo(f"[{label}] DP audit: training once with {canaries} canaries")
        records.append(run_dp_audit(cfg, Path(out) / "cache" / "dp_audit" / f"run{i}", dp_settings, label=label))
    write_report(out, [], [], dp=records)
    return records


@python_errors()
def attack_settings(*, method: str | list[str] = "all", eps: float = 8 / 255, alpha: float | None = None,
                    steps: int = 10, target: str = "query", precision: str = "fp32", max_queries: int | None = None,
                    batch_size: int = 32, examples: int = 4) -> dict[str, Any]:
    """``privreid attack``'s settings (methods, budget, target, precision), checked before any model loads;
    ``alpha`` ``None``: 2.5 eps / steps."""
    from privreid.retrieval_attacks.feature_attacks import check_budget, default_alpha
    from privreid.retrieval_attacks.retrieval import TARGETS, resolve_methods

    settings = {"eps": eps, "steps": steps, "target": target, "alpha": alpha, "methods": resolve_methods(method),
                "precision": precision}
    check_budget(eps, alpha, steps)
    if alpha is None:
        settings["alpha"] = default_alpha(eps, steps)
    if target not in TARGETS:
        raise ConfigError(f"--target must be one of {', '.join(TARGETS)}, got {target!r}")
    for name, value, low in (("--max-queries", max_queries, 1), ("--batch-size", batch_size, 1),
                             ("--examples", examples, 0)):
        if value is not None and value < low:
            raise ConfigError(f"{name} must be >= {low}, got {value}")
    return settings


@python_errors()
def attack_run(settings: dict[str, Any], out: Any = None, *, client: str | None = None, data: Any = None,
               domains: str | None = None, max_queries: int | None = None, batch_size: int = 32, examples: int = 4,
               seed: int = 0, device: str = "auto", precision: str = "fp32", compile: bool = False, announce=None,
               **file_options: Any) -> str:
    """``privreid attack``: the models of ``settings["paths"]`` (:func:`attack_settings`) under every attack
    (:func:`privreid.retrieval_attacks.campaign.attack_checkpoints`); the report written into ``out`` when given.
    Returns the report (:func:`privreid.reporting.tables.attack_report`)."""
    from privreid.provenance import record_models
    from privreid.reporting.tables import attack_report
    from privreid.retrieval_attacks.campaign import attack_checkpoints, write_attack_report

    loaded = load_models(settings["paths"], announce=announce, **file_options)
    records, pictures = attack_checkpoints(settings, client=client, data=data, domains=_csv(domains) or None,
                                           max_queries=max_queries, batch_size=batch_size, examples=examples,
                                           seed=seed, device=device, models=loaded, precision=precision,
                                           compile=compile)
    report = attack_report(records, settings)
    if out is not None:
        write_attack_report(Path(out), report, records, pictures, settings)
        record_models(out, loaded)
    return report
