"""The one way privreid scores a model on a test set: the test set's own ranking protocol.

Every evaluation path (training-time evaluation, ``privreid eval``, the clean and attacked rankings of ``privreid
attack``, the clean and corrupted rankings of corrupted evaluation, ``privreid compare`` and its report suite) ranks
through :func:`rank_testset`, and extracts features of a test set's samples with :func:`sample_features` or, for
images it transforms itself (adversarial, corrupted), :func:`dataset_features`.  The test set decides the protocol,
here and nowhere else (:func:`is_cross_modality`):

* a test set with a modality map or tracklets (visible-infrared or video) is ranked by
  :func:`~privreid.evaluation.cross_modality.evaluate_cross_modality` under its ``vi_protocol`` (single-shot gallery
  trials, co-located cameras, CMC over identities), its query restricted to one modality and its gallery to the other
  (:func:`~privreid.evaluation.cross_modality.mode_split`, ``mode``); video tracklets are the temporal mean of
  ``T = vi_protocol.seq_len`` frame features (Eq. 9 of L2RW+);
* any other test set by the Market-1501 rules (:func:`~privreid.evaluation.metrics.evaluate`), or CUHK03's single
  gallery shot (:func:`~privreid.evaluation.metrics.evaluate_cuhk03`), with torchreid's AP or (``ap="devkit"``) the
  Market-1501 devkit's, averaged over all queries as the FedPav reference code does
  (:data:`~privreid.evaluation.metrics.AP_MODES`).

A model whose features are not all finite cannot rank: it is scored at chance level, the exact expectation under a
uniformly random ranking (:mod:`privreid.evaluation.chance`), with a :class:`NonFiniteFeaturesWarning`, and the result
carries ``"non_finite_features": True``.  Finite features so large that squared distances would overflow float32 are
first multiplied by a power of two, which leaves every ranking unchanged.
"""

from __future__ import annotations

import inspect
import math
import warnings

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from privreid.data import ImageDataset, SequenceDataset, build_transforms
from privreid.data.catalog import resolve_datasets, verify_datasets
from privreid.data.partition import as_test_set
from privreid.data.types import Sample, TestSet
from privreid.errors import ConfigError
from privreid.evaluation.chance import chance_metrics
from privreid.evaluation.cross_modality import IR_TO_VISIBLE, MODES, TemporalMean, evaluate_cross_modality, mode_split
from privreid.evaluation.features import extract_features
from privreid.evaluation.metric_registry import result_keys
from privreid.evaluation.metrics import AP_MODES, evaluate, evaluate_cuhk03

__all__ = ["NonFiniteFeaturesWarning", "check_eval_options", "check_protocol",
           "dataset_features", "describe_protocol", "evaluate_model", "is_cross_modality",
           "rank_testset", "resolve_testsets", "sample_features"]

#: features larger than this (in absolute value) are scaled down by a power of two before ranking
_LARGEST_FEATURE = 2.0 ** 40


class NonFiniteFeaturesWarning(RuntimeWarning):
    """A model produced NaN or infinite features; it was scored at chance level."""


def is_cross_modality(testset: TestSet) -> bool:
    """Whether ``testset`` is ranked by its visible-infrared / video protocol (it has modalities or tracklets)."""
    return testset.modality is not None or testset.tracklets is not None


def resolve_testsets(data, domains: str | list[str] | None = None, *, fmt: str = "auto", synth_seed: int = 0,
                     verify: bool = False) -> list[TestSet]:
    """``data`` as test sets: a TestSet, a list of them, or ``--data`` values (a root, ``synth`` ...; read as
    ``fmt``, the synthetic data drawn with ``synth_seed``, their query and gallery images checked with ``verify``);
    ``domains`` (a list or a comma list) keeps those test sets, in that order (ConfigError naming an unknown one)."""
    data = [data] if isinstance(data, (str, Path, TestSet)) else list(data)
    if all(isinstance(t, TestSet) for t in data):
        found = {t.name: t for t in data}
    else:
        found = resolve_datasets([str(d) for d in data], fmt, synth_seed)
    if isinstance(domains, str):
        domains = [d.strip() for d in domains.split(",") if d.strip()]
    wanted = list(found) if domains is None else list(domains)
    unknown = [d for d in wanted if d not in found]
    if unknown or (domains is not None and not wanted):
        raise ConfigError(f"unknown domain(s) {', '.join(unknown) or '(none given)'}; available: {', '.join(found)}")
    if verify:
        verify_datasets({name: found[name] for name in wanted}, splits=("query", "gallery"))
    return [found[d] if isinstance(found[d], TestSet) else as_test_set(d, found[d]) for d in wanted]


def rank_testset(testset: TestSet, query, gallery, *, metric: str = "euclidean", single_gallery_shot: bool = False,
                 seed: int = 0, ap: str = "torchreid") -> dict:
    """Rank ``query`` against ``gallery`` features of ``testset`` under its protocol (module docstring).

    ``query`` and ``gallery`` are ``(feats, pids, camids)`` triples (as :func:`extract_features` returns), e.g. of
    :func:`~privreid.evaluation.cross_modality.mode_split`'s samples, possibly a subset or transformed.  ``seed``
    draws the single-shot gallery trials of a VI protocol.  ``ap`` (Market-style test sets only): ``"torchreid"`` or
    ``"devkit"`` (:func:`~privreid.evaluation.metrics.evaluate`); chance-level metrics are torchreid's expectation
    whatever ``ap``.

    Returns a flat, JSON-ready dict: ``rank1``, ``rank5``, ``rank10``, ``rank20``, ``mAP``, ``mINP``,
    ``num_valid_queries``; with several gallery trials also ``trials`` and ``std`` (per metric, over the trials); and
    ``non_finite_features: True`` when the features were not finite (chance-level metrics).
    """
    check_protocol(testset, single_gallery_shot, ap)
    cross = is_cross_modality(testset)
    (qf, q_pids, q_cams), (gf, g_pids, g_cams) = query, gallery
    qf, gf = torch.as_tensor(qf, dtype=torch.float32), torch.as_tensor(gf, dtype=torch.float32)
    protocol = testset.vi_protocol if cross else None
    if not (bool(torch.isfinite(qf).all()) and bool(torch.isfinite(gf).all())):
        warnings.warn(f"{testset.name}: the model's features contain NaN or infinite values, so it cannot rank; "
                      "reporting chance-level metrics (the expectation under a uniformly random ranking)",
                      NonFiniteFeaturesWarning, stacklevel=2)
        result = chance_metrics(q_pids, g_pids, q_cams, g_cams, protocol=protocol,
                                single_gallery_shot=single_gallery_shot, seed=seed)
        return {**result, "non_finite_features": True}
    largest = max(float(qf.abs().max()) if qf.numel() else 0.0, float(gf.abs().max()) if gf.numel() else 0.0)
    if largest > _LARGEST_FEATURE:
        scale = 2.0 ** -math.ceil(math.log2(largest))
        qf, gf = qf * scale, gf * scale
    if cross:
        result = evaluate_cross_modality(qf, gf, q_pids, g_pids, q_cams, g_cams, protocol=protocol, metric=metric,
                                         seed=seed)
    else:
        rank = evaluate_cuhk03 if single_gallery_shot else evaluate
        result = rank(qf, gf, q_pids, g_pids, q_cams, g_cams, metric=metric, ap=ap)
    out = {k: float(result[k]) for k in result_keys()}
    out["num_valid_queries"] = int(result["num_valid_queries"])
    if result.get("trials", 1) > 1:
        out["trials"] = int(result["trials"])
        out["std"] = dict(result["std"])
    return out


def describe_protocol(testset: TestSet, ap: str = "torchreid") -> str:
    """How :func:`rank_testset` ranks ``testset`` (without the CUHK03 option), in words, for dry runs and reports."""
    if not is_cross_modality(testset):
        mean_ap = ("the Market-1501 devkit's trapezoid AP over all queries" if ap == "devkit" else
                   "torchreid's AP over queries with a positive")
        return (f"Market-1501 rules: {len(testset.query)} queries x {len(testset.gallery)} gallery images, same "
                f"identity and camera removed from the gallery, mAP: {mean_ap}")
    p = testset.vi_protocol
    kind = f"video (tracklets, mean of {p.seq_len} frames)" if testset.tracklets is not None else "visible-infrared"
    trials = "the whole gallery" if p.gallery_trials == 1 else f"{p.gallery_trials} single-shot gallery trials"
    parts = [kind, f"{IR_TO_VISIBLE} by default", trials]
    if p.cmc_by_identity:
        parts.append("CMC over identities")
    if p.colocated_cameras:
        parts.append(f"co-located cameras {list(p.colocated_cameras)} ignore each other")
    return ", ".join(parts)


def check_protocol(testset: TestSet, single_gallery_shot: bool, ap: str = "torchreid") -> None:
    """Refuse the CUHK03 protocol, or an AP other than torchreid's, on a test set ranked by its own
    visible-infrared / video protocol, and an unknown ``ap``."""
    if ap not in AP_MODES:
        raise ConfigError(f"unknown ap {ap!r}; expected one of {AP_MODES}")
    if single_gallery_shot and is_cross_modality(testset):
        raise ConfigError(f"the CUHK03 single-gallery-shot protocol does not apply to {testset.name}, a "
                          "visible-infrared or video test set ranked by its own protocol")
    if ap != "torchreid" and is_cross_modality(testset):
        raise ConfigError(f"the Market-1501 devkit's AP does not apply to {testset.name}, a visible-infrared or "
                          "video test set ranked by its own protocol")


def dataset_features(model: torch.nn.Module, dataset, *, batch_size: int = 128, device: torch.device | str = "cpu",
                     flip: bool = False, num_workers: int = 0, progress: bool = False):
    """``(feats, pids, camids)`` of a dataset of ``(image, pid, camid)`` items, in order (:func:`extract_features`)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    return extract_features(model, loader, device=device, flip=flip, progress=progress)


def sample_features(model: torch.nn.Module, testset: TestSet, samples: list[Sample], *, height: int, width: int,
                     seq_len: int | None = None, batch_size: int = 128, device: torch.device | str = "cpu",
                     flip: bool = False, num_workers: int = 0, progress: bool = False,
                     interpolation: str = "bilinear"):
    """``(feats, pids, camids)`` of ``samples`` of ``testset`` with the test transform.

    Images one by one; tracklets (a test set with ``tracklets``) as the mean of ``seq_len`` frame features (default
    ``testset.vi_protocol.seq_len``), ``max(1, batch_size // seq_len)`` tracklets per batch.
    """
    transform = build_transforms(height, width, train=False, interpolation=interpolation)
    if testset.tracklets is None:
        return dataset_features(model, ImageDataset(samples, transform), batch_size=batch_size, device=device,
                                flip=flip, num_workers=num_workers, progress=progress)
    seq_len = testset.vi_protocol.seq_len if seq_len is None else seq_len
    return dataset_features(TemporalMean(model), SequenceDataset(samples, testset.tracklets, transform, seq_len),
                            batch_size=max(1, batch_size // seq_len), device=device, flip=flip,
                            num_workers=num_workers, progress=progress)


def evaluate_model(
    model: torch.nn.Module,
    testset: TestSet,
    *,
    height: int,
    width: int,
    mode: str = IR_TO_VISIBLE,
    seq_len: int | None = None,
    batch_size: int = 128,
    device: torch.device | str = "cpu",
    flip: bool = False,
    num_workers: int = 0,
    metric: str = "euclidean",
    single_gallery_shot: bool = False,
    ap: str = "torchreid",
    seed: int = 0,
    progress: bool = False,
    interpolation: str = "bilinear",
) -> dict:
    """R1/R5/R10/R20/mAP/mINP of ``model`` on ``testset`` under its protocol (:func:`rank_testset`).

    ``mode`` applies to visible-infrared test sets (``ir-to-visible``, the L2RW+ tables' mode, or ``visible-to-ir``)
    and ``seq_len`` to video ones; ``single_gallery_shot`` is the CUHK03 protocol (Market-style test sets only).
    ``flip`` averages each feature with that of the flipped image.  ``ap``: ``"torchreid"`` or ``"devkit"``
    (:func:`rank_testset`).  ``interpolation``: the test resize, ``bilinear`` or ``bicubic`` (fast-reid's).
    """
    check_protocol(testset, single_gallery_shot, ap)
    query, gallery = mode_split(testset, mode)
    extract = dict(height=height, width=width, seq_len=seq_len, batch_size=batch_size, device=device, flip=flip,
                   num_workers=num_workers, progress=progress, interpolation=interpolation)
    return rank_testset(testset, sample_features(model, testset, query, **extract),
                        sample_features(model, testset, gallery, **extract), metric=metric,
                        single_gallery_shot=single_gallery_shot, seed=seed, ap=ap)


#: the keyword arguments of :func:`evaluate_model` that say how features are extracted and ranked
EVALUATION_SETTINGS = ("height", "width", "batch_size", "device", "flip", "num_workers", "metric",
                       "single_gallery_shot", "ap", "interpolation")


def evaluation_settings(**given) -> dict:
    """``given`` completed with :func:`evaluate_model`'s defaults, for evaluations that extract and rank as it does.

    Raises:
        TypeError: a name that is not in :data:`EVALUATION_SETTINGS`, or no
            ``height`` / ``width`` (as for a function's own keyword arguments).
    """
    unknown = sorted(set(given) - set(EVALUATION_SETTINGS))
    if unknown:
        raise TypeError(f"unexpected evaluation setting(s): {', '.join(unknown)}")
    defaults = inspect.signature(evaluate_model).parameters
    missing = [name for name in EVALUATION_SETTINGS
               if name not in given and defaults[name].default is inspect.Parameter.empty]
    if missing:
        raise TypeError(f"missing evaluation setting(s): {', '.join(missing)}")
    return {name: given.get(name, defaults[name].default) for name in EVALUATION_SETTINGS}


def check_eval_options(testsets: list[TestSet], *, mode: str | None = None, seq_len: int | None = None,
                       corrupted: bool = False, single_gallery_shot: bool = False) -> None:
    """Refuse evaluation options on test sets they do not apply to (before any evaluation).

    ``mode`` is for visible-infrared test sets, ``seq_len`` for video ones, corruptions (``corrupted``) for image ones
    and the CUHK03 ``single_gallery_shot`` for Market-style ones (``privreid eval``'s ``--mode``, ``--seq-len``,
    ``--corruption``, ``--single-gallery-shot``).
    """
    if mode is not None and mode not in MODES:
        raise ConfigError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    if seq_len is not None and seq_len < 1:
        raise ConfigError(f"--seq-len must be at least 1, got {seq_len}")
    if corrupted and (mode is not None or seq_len is not None):
        raise ConfigError("--mode and --seq-len do not combine with --corruption (it ranks each dataset's "
                          "query/gallery split as given: infrared-to-visible for VI data)")
    for ts in testsets:
        if mode is not None and ts.modality is None:
            raise ConfigError(f"--mode applies to visible-infrared data only; {ts.name} has no modality map")
        if seq_len is not None and ts.tracklets is None:
            raise ConfigError(f"--seq-len applies to video data only; {ts.name} holds images")
        if corrupted and ts.tracklets is not None:
            raise ConfigError(f"--corruption corrupts images; {ts.name} holds video tracklets")
        if single_gallery_shot and is_cross_modality(ts):
            raise ConfigError(f"--single-gallery-shot is the CUHK03 protocol; {ts.name} is visible-infrared "
                              "or video data, ranked by its own benchmark protocol")
