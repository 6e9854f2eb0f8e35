"""Evaluate a model on a query/gallery test set (extract features, then rank)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from ..data import ImageDataset, build_transforms
from ..data.types import TestSet
from .features import extract_features
from .metrics import evaluate, evaluate_cuhk03

SUMMARY_KEYS = ("rank1", "rank5", "rank10", "mAP", "mINP")


def evaluate_model(
    model: torch.nn.Module,
    testset: TestSet,
    *,
    height: int,
    width: int,
    batch_size: int = 128,
    device: torch.device | str = "cpu",
    flip: bool = False,
    num_workers: int = 0,
    metric: str = "euclidean",
    single_gallery_shot: bool = False,
) -> dict[str, float]:
    """R1/R5/R10/mAP/mINP of ``model`` on ``testset``.

    The Market-1501 protocol of torchreid by default; ``single_gallery_shot``
    uses the CUHK03 protocol (one gallery image per identity, 10 repeats).
    A visible-infrared or video test set (with ``modality`` or ``tracklets``)
    is evaluated infrared-to-visible under its own protocol by
    :func:`privreid.evaluation.cross_modality.evaluate_cross_modality_model`.
    """
    if testset.modality is not None or testset.tracklets is not None:
        from .cross_modality import evaluate_cross_modality_model

        result = evaluate_cross_modality_model(model, testset, height=height, width=width, batch_size=batch_size,
                                               device=device, flip=flip, metric=metric, num_workers=num_workers)
        return {**{k: float(result[k]) for k in SUMMARY_KEYS}, "num_valid_queries": int(result["num_valid_queries"])}
    transform = build_transforms(height, width, train=False)
    query, gallery = (dataset_features(model, ImageDataset(samples, transform), batch_size=batch_size,
                                       device=device, flip=flip, num_workers=num_workers)
                      for samples in (testset.query, testset.gallery))
    return rank_summary(query, gallery, metric=metric, single_gallery_shot=single_gallery_shot)


def dataset_features(model: torch.nn.Module, dataset, *, batch_size: int = 128, device: torch.device | str = "cpu",
                     flip: bool = False, num_workers: int = 0):
    """``(feats, pids, camids)`` of a dataset of ``(image, pid, camid)`` items, in order (:func:`extract_features`)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    return extract_features(model, loader, device=device, flip=flip)


def rank_summary(query, gallery, *, metric: str = "euclidean", single_gallery_shot: bool = False) -> dict[str, float]:
    """R1/R5/R10/mAP/mINP and ``num_valid_queries`` from query and gallery ``(feats, pids, camids)`` triples."""
    (qf, q_pids, q_cams), (gf, g_pids, g_cams) = query, gallery
    rank = evaluate_cuhk03 if single_gallery_shot else evaluate
    result = rank(qf, gf, q_pids, g_pids, q_cams, g_cams, metric=metric)
    out = {k: float(result[k]) for k in SUMMARY_KEYS}
    out["num_valid_queries"] = int(result["num_valid_queries"])
    return out
