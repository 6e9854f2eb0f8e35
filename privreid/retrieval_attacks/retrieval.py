"""ReID retrieval under adversarial attack: clean vs attacked R1 / mAP / mINP, tables and pictures.

Protocol (L2RW+, paper 003, Sec. IV-F, Table IX): the queries, the gallery or both are replaced by their
adversarial versions (:mod:`privreid.retrieval_attacks.feature_attacks`), features re-extracted, and ranked by
the test set's own protocol (:func:`privreid.evaluation.model_eval.rank_testset`), so the clean row equals
``privreid eval``. Video test sets are refused. The relative drop ``(clean - attacked) / clean`` is Table IX's
"↓" row.

Images are loaded in ``[0, 1]`` (identity normalisation); the attack object applies the model's normalisation
for clean and attacked features alike, so ``eps = 0`` reproduces the clean metrics bit for bit. Randomness
(PGD's start, TI's input diversity, the loaders) comes from torch's generator seeded with ``seed`` inside
:func:`torch.random.fork_rng`, leaving the caller's RNG untouched.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader

from privreid.retrieval_attacks.feature_attacks import RETRIEVAL_ATTACKS, FeatureAttack, build_attack
from privreid.data import ImageDataset, build_transforms
from privreid.data.types import Sample, TestSet
from privreid.errors import ConfigError
from privreid.evaluation.metric_registry import headline
from privreid.evaluation.features import extract_features
from privreid.evaluation.cross_modality import mode_split
from privreid.evaluation.model_eval import rank_testset
from privreid.io import format_table, pyplot, save_figure
from privreid.log import progress_bar

__all__ = ["TARGETS", "AttackEvaluation", "attack_label", "evaluate_under_attack", "format_table_ix",
           "pixel_transforms", "plot_attack_examples", "relative_drop", "resolve_methods"]

#: Which images are attacked.
TARGETS = ("query", "gallery", "both")


def attack_label(name: str) -> str:
    """The Table IX row label of attack ``name`` (:attr:`FeatureAttack.label` of the registered attack, read
    when asked, so attacks registered later have theirs); ``name`` itself for a name that is not an attack."""
    return (RETRIEVAL_ATTACKS[name].label or name) if name in RETRIEVAL_ATTACKS else name


def relative_drop(clean: float, attacked: float) -> float | None:
    """Table IX's "↓": ``(clean - attacked) / clean`` as a fraction (``None`` when ``clean == 0``)."""
    return (clean - attacked) / clean if clean > 0 else None


def resolve_methods(spec: str | list[str]) -> list[str]:
    """``"all"`` -> every attack in Table IX order; ``"fgsm,pgd"`` or a list -> those, validated, without repeats."""
    names = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not names:
        raise ConfigError("no attack method given")
    if "all" in names:
        return RETRIEVAL_ATTACKS.names()
    unknown = [m for m in names if m not in RETRIEVAL_ATTACKS]
    if unknown:
        raise RETRIEVAL_ATTACKS.unknown(unknown[0], [*RETRIEVAL_ATTACKS.names(), "all"])
    return list(dict.fromkeys(names))


def pixel_transforms(height: int, width: int, interpolation: str = "bilinear"):
    """The test transform (resize, to tensor) with an identity normalisation: ``[0, 1]`` pixels."""
    return build_transforms(height, width, train=False, norm_mean=(0.0, 0.0, 0.0), norm_std=(1.0, 1.0, 1.0),
                            interpolation=interpolation)


@dataclass
class AttackEvaluation:
    """Clean vs attacked retrieval of one model on one test set under one attack.

    ``clean``, ``attacked``, ``drop``: ``rank1`` / ``mAP`` / ``mINP`` fractions; ``max_perturbation``: the
    largest ``|x' - x|`` (at most ``eps``); ``feature_shift``: mean ``||f(x') - f(x)|| / ||f(x)||``;
    ``example_*``: the first attacked images (``(k, 3, H, W)``, CPU) when asked for.
    """

    method: str
    target: str
    eps: float
    alpha: float
    steps: int
    clean: dict[str, float]
    attacked: dict[str, float]
    drop: dict[str, float | None]
    max_perturbation: float
    feature_shift: float
    attacked_images: int
    attack_seconds: float
    example_clean: torch.Tensor | None = field(default=None, repr=False)
    example_adversarial: torch.Tensor | None = field(default=None, repr=False)

    def record(self, **labels: Any) -> dict[str, Any]:
        """One flat row (for JSON / CSV): ``labels`` (e.g. model, testset), settings, metrics, drops."""
        row: dict[str, Any] = {**labels, "attack": self.method, "target": self.target, "eps": self.eps,
                               "alpha": self.alpha, "steps": self.steps}
        keys = [key for key, _ in headline()]
        row.update({f"clean_{key}": self.clean[key] for key in keys})
        row.update({key: self.attacked[key] for key in keys})
        row.update({f"drop_{key}": self.drop[key] for key in keys})
        row.update(max_perturbation=self.max_perturbation, feature_shift=self.feature_shift,
                   attacked_images=self.attacked_images, attack_seconds=self.attack_seconds)
        return row


def evaluate_under_attack(
    model: torch.nn.Module,
    testset: TestSet,
    *,
    height: int,
    width: int,
    method: str = "pgd",
    eps: float = 8 / 255,
    alpha: float | None = None,
    steps: int = 10,
    target: str = "query",
    device: torch.device | str = "cpu",
    progress: bool = False,
    batch_size: int = 32,
    max_queries: int | None = None,
    metric: str = "euclidean",
    examples: int = 0,
    seed: int = 0,
    interpolation: str = "bilinear",
) -> AttackEvaluation:
    """Clean and attacked R1 / mAP / mINP of ``model`` (already on ``device``) on ``testset``.

    ``eps``, ``alpha``, ``steps``: the budget in ``[0, 1]`` pixel units
    (:func:`~privreid.retrieval_attacks.feature_attacks.build_attack`); ``target``: ``query``, ``gallery`` or
    ``both``; ``max_queries``: that many evenly spaced queries, clean and attacked alike; ``examples``: image
    pairs kept for :func:`plot_attack_examples`; ``seed``: the attack's randomness. ConfigError for bad
    options or a video test set; DataError for an empty split or an unreadable image.
    """
    if target not in TARGETS:
        raise ConfigError(f"unknown attack target {target!r}; choose from {', '.join(TARGETS)}")
    if testset.tracklets is not None:
        raise ConfigError(f"the attacks perturb images; {testset.name} holds video tracklets")
    for name, value, low in (("max_queries", max_queries, 1), ("batch_size", batch_size, 1),
                             ("examples", examples, 0)):
        if value is not None and (isinstance(value, bool) or int(value) != value or value < low):
            raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
    attack = build_attack(method, model, eps=eps, alpha=alpha, steps=steps)
    transform = pixel_transforms(height, width, interpolation)
    query, gallery = mode_split(testset)
    sets = {"query": _evenly_spaced(query, max_queries), "gallery": gallery}

    def loader(samples: list[Sample]) -> DataLoader:
        return DataLoader(ImageDataset(samples, transform), batch_size=batch_size, shuffle=False)

    attacked_sets = ("query", "gallery") if target == "both" else (target,)
    stats = _AttackStats(examples)
    # Everything runs seeded: the attacks draw random numbers, and so does each DataLoader iteration.
    with _seeded(seed, device):
        clean = {name: extract_features(model, _normalised(attack, loader(samples), device), device=device)
                 for name, samples in sets.items()}
        attacked = dict(clean)
        start = time.perf_counter()
        for name in attacked_sets:
            batches = loader(sets[name])
            stream = _attacked(attack, batches, device, stats, keep_examples=name == attacked_sets[0],
                               clean_features=clean[name][0])
            attacked[name] = extract_features(model, progress_bar(
                stream, total=len(batches), unit="batch", leave=False, enabled=progress,
                desc=f"{attack_label(method)} {testset.name} {name}"), device=device)
    seconds = time.perf_counter() - start

    clean_metrics = _retrieval_metrics(testset, clean, metric)
    attacked_metrics = _retrieval_metrics(testset, attacked, metric)
    shift = torch.cat([_relative_shift(clean[name][0], attacked[name][0]) for name in attacked_sets])
    return AttackEvaluation(
        method=method, target=target, eps=float(eps), alpha=float(attack.alpha), steps=int(attack.steps),
        clean=clean_metrics, attacked=attacked_metrics,
        drop={k: relative_drop(clean_metrics[k], attacked_metrics[k]) for k, _ in headline()},
        max_perturbation=stats.max_perturbation, feature_shift=float(shift.mean()),
        attacked_images=int(len(shift)), attack_seconds=seconds,
        example_clean=torch.cat(stats.clean) if stats.clean else None,
        example_adversarial=torch.cat(stats.adversarial) if stats.adversarial else None,
    )


# --------------------------------------------------------------------------
# Helpers of evaluate_under_attack


class _AttackStats:
    """Running L_inf of the perturbations and the first ``wanted`` example pairs."""

    def __init__(self, wanted: int) -> None:
        self.wanted = int(wanted)
        self.max_perturbation = 0.0
        self.clean: list[torch.Tensor] = []
        self.adversarial: list[torch.Tensor] = []

    def update(self, images: torch.Tensor, adversarial: torch.Tensor, keep_examples: bool) -> None:
        self.max_perturbation = max(self.max_perturbation, float((adversarial - images).abs().max()))
        missing = self.wanted - sum(len(c) for c in self.clean)
        if keep_examples and missing > 0:
            self.clean.append(images[:missing].detach().cpu())
            self.adversarial.append(adversarial[:missing].detach().cpu())


def _normalised(attack: FeatureAttack, loader: DataLoader, device) -> Iterator:
    """``(normalise(x), pids, camids)`` batches: the model's input for clean ``[0, 1]`` images."""
    for images, pids, camids in loader:
        yield attack.normalize(images.to(device)), pids, camids


def _attacked(attack: FeatureAttack, loader: DataLoader, device, stats: _AttackStats,
              keep_examples: bool, clean_features: torch.Tensor) -> Iterator:
    """``(normalise(x'), pids, camids)`` batches of adversarial images, attacked as they are pulled; the attack
    reuses ``clean_features`` (same loader, same batches, bit-identical) instead of its own clean pass."""
    offset = 0
    for images, pids, camids in loader:
        images = images.to(device)
        adversarial = attack.perturb(images, clean_features[offset:offset + len(images)])
        offset += len(images)
        stats.update(images, adversarial, keep_examples)
        yield attack.normalize(adversarial), pids, camids


def _retrieval_metrics(testset: TestSet, features: dict[str, tuple], metric: str) -> dict[str, float]:
    result = rank_testset(testset, features["query"], features["gallery"], metric=metric)
    return {key: float(result[key]) for key, _ in headline()}


def _relative_shift(clean: torch.Tensor, attacked: torch.Tensor) -> torch.Tensor:
    return (attacked - clean).norm(dim=1) / clean.norm(dim=1).clamp_min(torch.finfo(clean.dtype).tiny)


def _evenly_spaced(samples: list[Sample], limit: int | None) -> list[Sample]:
    """At most ``limit`` samples at evenly spaced positions (all of them when ``limit`` is ``None``)."""
    if limit is None or limit >= len(samples):
        return list(samples)
    return [samples[i] for i in np.unique(np.linspace(0, len(samples) - 1, int(limit)).round().astype(int))]


@contextmanager
def _seeded(seed: int, device) -> Iterator[None]:
    device = torch.device(device)
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield


# --------------------------------------------------------------------------
# Reporting: Table IX, CSV, example images


def format_table_ix(records: list[dict[str, Any]]) -> str:
    """Markdown tables in the layout of L2RW+'s Table IX, one per test set: ``Clean``, then each attack and its
    "↓" row (relative drop, %); per model R1 / mAP / mINP (%). ``records``: :meth:`AttackEvaluation.record`s."""
    sections = []
    for testset in dict.fromkeys(r["testset"] for r in records):
        rows = [r for r in records if r["testset"] == testset]
        models = list(dict.fromkeys(r["model"] for r in rows))
        attacks = list(dict.fromkeys(r["attack"] for r in rows))
        cell = {(r["model"], r["attack"]): r for r in rows}

        def table_row(label: str, value) -> dict[str, Any]:
            out: dict[str, Any] = {"attack": label}
            for model in models:
                for key, column in headline():
                    out[f"{model} {column}"] = value(model, key)
            return out

        def first(model: str) -> dict[str, Any] | None:
            return next((cell[(model, a)] for a in attacks if (model, a) in cell), None)

        def clean(model: str, key: str):
            row = first(model)
            return None if row is None else row[f"clean_{key}"]

        body = [table_row("Clean", clean)]
        for attack in attacks:
            def attacked(model: str, key: str, attack=attack):
                row = cell.get((model, attack))
                return None if row is None else row[key]

            def drop(model: str, key: str, attack=attack):
                row = cell.get((model, attack))
                value = None if row is None else row[f"drop_{key}"]
                return "-" if value is None else f"{100 * value:.1f}%"

            body += [table_row(attack_label(attack), attacked), table_row("↓", drop)]
        sections.append(f"#### {testset}\n\n{format_table(body)}")
    return "\n\n".join(sections)


def plot_attack_examples(clean: torch.Tensor, adversarial: dict[str, torch.Tensor], eps: float,
                         path: str | Path, title: str | None = None) -> Path:
    """A PNG grid: one row per example; the clean image, then per attack the adversarial image and its
    perturbation shown as ``0.5 + (x' - x) / (2 eps)`` (mid-grey: unchanged). ``clean``: ``(k, 3, H, W)`` in
    ``[0, 1]``; ``adversarial``: attack name -> its versions of the same images.
    """
    plt = pyplot()
    if clean.ndim != 4 or len(clean) == 0:
        raise ConfigError("plot_attack_examples needs a non-empty (k, 3, H, W) batch of clean images")
    for name, adv in adversarial.items():
        if adv.shape != clean.shape:
            raise ConfigError(f"adversarial images of {name!r} have shape {tuple(adv.shape)}, "
                              f"clean ones {tuple(clean.shape)}")
    columns = [("clean", clean)]
    for name, adv in adversarial.items():
        label = attack_label(name)
        scale = 2 * eps if eps > 0 else 1.0
        columns += [(label, adv), (f"{label} δ ×{1 / scale:.0f}" if eps > 0 else f"{label} δ",
                                   (0.5 + (adv - clean) / scale).clamp(0, 1))]
    rows = len(clean)
    height, width = clean.shape[-2:]
    cell_w = 1.3
    cell_h = cell_w * height / width
    fig, axes = plt.subplots(rows, len(columns), figsize=(cell_w * len(columns), cell_h * rows + 0.6),
                             squeeze=False)
    for c, (label, images) in enumerate(columns):
        for r in range(rows):
            ax = axes[r][c]
            ax.imshow(images[r].permute(1, 2, 0).clamp(0, 1).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(label, fontsize=7)
    return save_figure(fig, path, title=title)

