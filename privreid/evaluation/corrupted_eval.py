"""Corruption robustness of a ReID model: CIL-ReID's evaluation protocol.

CIL-ReID (Chen et al., "Benchmarks for Corruption Invariant Person Re-identification", NeurIPS 2021 D&B; its
``corruption_transform``) corrupts test images on the fly:

* every corrupted image gets its own corruption type, drawn uniformly from the list (all 20 by default), and its own
  severity, uniform in 1-5 (``severity="random"``) or fixed;
* the corruption is applied at the stored size, *before* the test transform resizes the image; the corrupted image
  is 8-bit again (CIL-ReID's ``Image.fromarray(np.uint8(...))``; privreid rounds where numpy truncates);
* query, gallery or both are corrupted, the other side stays clean;
* ImageNet-C's pixel lengths are taken literally at the stored image size (``pixel_scale=1``): CIL-ReID ran
  ``imagecorruptions`` on Market-1501's 128x64 images as they are;
* the evaluation is repeated (10 times) with fresh draws and reported as the mean (std) of R1, mAP and mINP.

Any other ``pixel_scale`` (``"auto"``: lengths scaled to the image, :mod:`privreid.corruptions.common`) is the
*scaled* variant, and other repeat counts are not CIL-ReID's either: the result's ``deviations`` list says so
(:func:`corruption_deviations`, which also names the corruption types whose implementation measurably differs from
the package's), and reports built from it carry that list and say "scaled" in their titles.

Ranking: clean and corrupted features are ranked by the test set's own protocol
(:func:`privreid.evaluation.model_eval.rank_testset`: a visible-infrared test set in infrared-to-visible mode with its
gallery trials, co-located cameras and identity CMC), so the clean row equals ``privreid eval``.  Video test sets are
refused (corruptions act on images).

Reproducibility: image ``i`` of a side in repeat ``r`` draws its type, severity and noise from seeds derived from
``(seed, r, side, i)`` (:func:`privreid.seeding.derive_seed`), so results depend on ``seed`` only, not on batch size,
worker count or device.  The standard deviation is the sample one (``ddof=1``) over repeats (0 for one repeat).
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from privreid.corruptions import check_severity, resolve_corruptions, resolve_pixel_scale
from privreid.corruptions import corrupt as apply_corruption
from privreid.data import ImageDataset, build_transforms
from privreid.data.formats import read_image
from privreid.data.types import Sample, TestSet
from privreid.errors import ConfigError
from privreid.log import progress_bar
from privreid.seeding import derive_seed
from privreid.evaluation.cross_modality import IR_TO_VISIBLE, mode_split
from privreid.evaluation.metric_registry import summary_keys
from privreid.evaluation.metrics import check_count
from privreid.evaluation.model_eval import (check_protocol, dataset_features, evaluate_model,
                                            evaluation_settings, rank_testset)

CORRUPT_SIDES = ("query", "gallery", "both")
#: CIL-ReID's settings: literal pixel lengths, 10 repeats
CIL_REID_PIXEL_SCALE = 1.0
CIL_REID_REPEATS = 10


def is_scaled(pixel_scale: float | str) -> bool:
    """Whether ``pixel_scale`` is the scaled variant (anything but CIL-ReID's literal lengths)."""
    return pixel_scale != CIL_REID_PIXEL_SCALE


#: how privreid's corruptions differ from the ``imagecorruptions`` package CIL-ReID ran, at any setting
#: (measured at pixel scale 1 on 128x64 crops; see the corruption functions' docstrings)
IMPLEMENTATION_DEVIATION = ("corruptions: frost uses procedural textures matched in per-channel mean and std to "
                            "imagecorruptions' photographs; against imagecorruptions 1.1.2, zoom blur is 4-10% "
                            "weaker, water spatter (severities 2-3) about 18% weaker and pixelate up to 28% "
                            "stronger (severities 1, 3, 4) in mean absolute change")


def corruption_deviations(pixel_scale: float | str, repeats: int) -> list[str]:
    """One line per way a corrupted evaluation departs from CIL-ReID's protocol and implementation."""
    out = [IMPLEMENTATION_DEVIATION]
    if is_scaled(pixel_scale):
        scale = "sqrt(H*W)/224" if pixel_scale == "auto" else f"{pixel_scale:g}"
        out.append(f"corruptions scaled: ImageNet-C pixel lengths multiplied by {scale} (CIL-ReID: 1, "
                   "the literal lengths at the stored image size)")
    if repeats != CIL_REID_REPEATS:
        out.append(f"corrupted evaluation repeated {repeats} time(s) (CIL-ReID: {CIL_REID_REPEATS})")
    return out


def corrupt_pil(image: Image.Image, name: str, severity: int, *, seed: int,
                pixel_scale: float | str = 1.0) -> Image.Image:
    """Corrupt one PIL image at its own size and return it as an 8-bit RGB PIL image."""
    x = pil_to_tensor(image.convert("RGB")).float().div(255)[None]
    y = apply_corruption(x, name, severity, generator=seed, pixel_scale=pixel_scale)[0]
    return Image.fromarray(y.mul(255).round().to(torch.uint8).permute(1, 2, 0).numpy())


class CorruptedImageDataset(ImageDataset):
    """An :class:`ImageDataset` whose image ``i`` is corrupted by ``jobs[i]`` before the transform.

    ``jobs[i]`` is ``(name, severity, seed)`` or ``None`` (left clean).
    """

    def __init__(self, samples: list[Sample], transform, jobs: list[tuple[str, int, int] | None], *,
                 pixel_scale: float | str = 1.0) -> None:
        super().__init__(samples, transform)
        if len(jobs) != len(self.samples):
            raise ValueError(f"{len(jobs)} jobs for {len(self.samples)} samples")
        self.jobs = list(jobs)
        self.pixel_scale = pixel_scale

    def __getitem__(self, index: int):
        path, pid, camid = self.samples[index]
        image = read_image(path)
        job = self.jobs[index]
        if job is not None:
            name, severity, seed = job
            image = corrupt_pil(image, name, severity, seed=seed, pixel_scale=self.pixel_scale)
        return self.transform(image), pid, camid


def draw_jobs(count: int, names: list[str], severity: int | str, *, seed: int, repeat: int,
              side: str) -> list[tuple[str, int, int]]:
    """Type, severity and noise seed of each of ``count`` images of one side in one repeat."""
    rng = np.random.default_rng(derive_seed("corrupted-eval", seed, repeat, side))
    kinds = rng.integers(len(names), size=count)
    levels = rng.integers(1, 6, size=count) if severity == "random" else np.full(count, severity)
    return [(names[k], int(s), derive_seed("corruption", seed, repeat, side, i))
            for i, (k, s) in enumerate(zip(kinds, levels))]


def check_corruption_options(*, corrupt: str, severity, repeats, seed, pixel_scale) -> None:
    """ConfigError for a bad side, severity, repeat count, seed or pixel scale (before any work is done)."""
    resolve_pixel_scale(pixel_scale, 2, 2)
    if corrupt not in CORRUPT_SIDES:
        raise ConfigError(f"corrupt must be one of {', '.join(CORRUPT_SIDES)}, got {corrupt!r}")
    if severity != "random":
        check_severity(severity)
    check_count("repeats", repeats, 1)
    check_count("seed", seed, 0)


def evaluate_corrupted(
    model: torch.nn.Module,
    testset: TestSet,
    *,
    corruptions: str | list[str] = "all",
    severity: int | str = "random",
    corrupt: str = "both",
    repeats: int = 10,
    seed: int = 0,
    pixel_scale: float | str = CIL_REID_PIXEL_SCALE,
    progress: bool = False,
    **evaluation,
) -> dict:
    """R1 / mAP / mINP of ``model`` on ``testset`` under CIL-ReID's corruption protocol (module docstring).

    Args:
        corruptions: ``"all"``, a family (``"noise"``, ``"blur"``, ``"weather"``, ``"digital"``), a corruption name or
            a list of them (:func:`privreid.corruptions.resolve_corruptions`).
        severity: 1-5, or ``"random"`` (uniform per image).
        corrupt: ``"query"``, ``"gallery"`` or ``"both"``.
        repeats: number of evaluations with fresh draws (CIL-ReID: 10).
        seed: non-negative integer; the same seed gives the same result.
        pixel_scale: 1 (CIL-ReID), ``"auto"`` or a factor (:func:`privreid.corruptions.corrupt`); anything but 1 is
            the scaled variant.
        progress: show a progress bar over the feature-extraction passes.

        evaluation: ``height`` and ``width`` (required), ``batch_size``, ``device``, ``flip``, ``num_workers``,
            ``metric``, ``single_gallery_shot`` and ``ap``: the keyword arguments of
            :func:`privreid.evaluation.model_eval.evaluate_model`, with its defaults
            (:func:`~privreid.evaluation.model_eval.evaluation_settings`); visible-infrared test sets are ranked in its
            default mode, infrared to visible.

    Returns:
        ``{"clean": metrics, "repeats": [metrics, ...], "mean": {...}, "std": {...}, "corruptions": [...],
        "severity": ..., "corrupt": ..., "pixel_scale": ..., "deviations": [...], "type_counts": {name: images},
        "severity_counts": {level: images}}`` where ``metrics`` is
        :func:`~privreid.evaluation.model_eval.rank_testset`'s dict and ``mean`` / ``std`` cover R1/R5/R10/mAP/mINP;
        the counts are over all repeats; ``deviations`` is :func:`corruption_deviations`.  The clean run is exactly
        ``evaluate_model``'s.

    Raises:
        ConfigError: bad corruption name, severity, side, repeats, seed or pixel scale, or a video test set.
    """
    settings = evaluation_settings(**evaluation)
    names = resolve_corruptions(corruptions)
    if testset.tracklets is not None:
        raise ConfigError(f"corruptions act on images; {testset.name} holds video tracklets")
    check_protocol(testset, settings["single_gallery_shot"], settings["ap"])
    check_corruption_options(corrupt=corrupt, severity=severity, repeats=repeats, seed=seed, pixel_scale=pixel_scale)
    transform = build_transforms(settings["height"], settings["width"], train=False,
                                 interpolation=settings["interpolation"])
    sides = dict(zip(("query", "gallery"), mode_split(testset)))
    corrupted_sides = ["query", "gallery"] if corrupt == "both" else [corrupt]
    extract = {key: settings[key] for key in ("batch_size", "device", "flip", "num_workers")}
    rank = {key: settings[key] for key in ("metric", "single_gallery_shot", "ap")}
    with progress_bar(total=1 + repeats, desc="corrupted eval", unit="pass", enabled=progress) as bar:
        clean = {side: dataset_features(model, ImageDataset(samples, transform), **extract)
                 for side, samples in sides.items()}
        clean_metrics = rank_testset(testset, clean["query"], clean["gallery"], **rank)
        bar.update(1)
        results, type_counts, severity_counts = [], dict.fromkeys(names, 0), dict.fromkeys(range(1, 6), 0)
        for r in range(repeats):
            feats = dict(clean)
            for side in corrupted_sides:
                jobs = draw_jobs(len(sides[side]), names, severity, seed=seed, repeat=r, side=side)
                for name, level, _ in jobs:
                    type_counts[name] += 1
                    severity_counts[level] += 1
                dataset = CorruptedImageDataset(sides[side], transform, jobs, pixel_scale=pixel_scale)
                feats[side] = dataset_features(model, dataset, **extract)
            results.append(rank_testset(testset, feats["query"], feats["gallery"], **rank))
            bar.update(1)
    table = np.array([[res[k] for k in summary_keys()] for res in results])
    std = table.std(axis=0, ddof=1) if repeats > 1 else np.zeros(len(summary_keys()))
    return {
        "clean": clean_metrics,
        "repeats": results,
        "mean": dict(zip(summary_keys(), map(float, table.mean(axis=0)))),
        "std": dict(zip(summary_keys(), map(float, std))),
        "corruptions": names,
        "severity": severity,
        "corrupt": corrupt,
        "pixel_scale": pixel_scale,
        "deviations": corruption_deviations(pixel_scale, repeats),
        "type_counts": type_counts,
        "severity_counts": {k: v for k, v in severity_counts.items() if v},
    }


def evaluate_testset(model: torch.nn.Module, testset: TestSet, *, corrupted: dict | None = None,
                     mode: str | None = None, seq_len: int | None = None, **common) -> dict:
    """One ``privreid eval`` row: ``{"testset": name, **metrics}`` of ``model`` on ``testset``.

    With ``corrupted`` (the keyword arguments of :func:`evaluate_corrupted`): the corrupted evaluation; otherwise
    :func:`evaluate_model`, in ``mode`` (default infrared to visible) with the row's ``"mode"`` for a visible-infrared
    test set.  ``common``: height, width, device, flip, metric, single_gallery_shot, progress."""
    if corrupted is not None:
        return {"testset": testset.name, **evaluate_corrupted(model, testset, **common, **corrupted)}
    row = {"testset": testset.name, **evaluate_model(model, testset, mode=mode or IR_TO_VISIBLE, seq_len=seq_len,
                                                     **common)}
    return {**row, "mode": mode or IR_TO_VISIBLE} if testset.modality is not None else row
