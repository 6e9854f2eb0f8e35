"""Evaluation of a model on the small DG benchmarks under their own protocols.

* ``dg`` / ``crosscam`` (:mod:`privreid.data.formats.dg.splits`): every split's query is ranked against its gallery
  with the Market-1501 ranking of :func:`privreid.evaluation.metrics.evaluate`; the result is the mean and the
  (population) std over the splits, as Song et al. (CVPR 2019) and FedReID (paper 002, Table II) report it.
* ``fixed`` (CUHK-SYSU, FedReID's test: paper 002, Table I): the 2,900 query crops ranked against one gallery, the
  crops of the queries' persons in their gallery scenes (:func:`~privreid.data.formats.dg.cuhksysu.read_fixed_set`).
* ``g100`` (CUHK-SYSU's TestG100): each of the 2,900 queries is ranked against its own gallery (the crops of its 100
  gallery scenes); R-k, mAP and mINP are means over the queries with a match in their gallery.

Features are extracted once per image, whatever the number of splits.  ``--format`` names for
:func:`resolve_eval_format`: a dataset format of :data:`privreid.data.formats.dg.DG_FORMATS` (``cuhksysu`` ->
``fixed``, the others -> their :func:`~privreid.data.formats.dg.splits.default_protocol`), ``cuhksysu-g100``, or
``grid-crosscam`` / ``caviar-crosscam`` (FedPav, paper 004, Table 5).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from privreid.data import ImageDataset, build_transforms
from privreid.data.formats.dg import DG_FORMATS, load_pool
from privreid.data.formats.dg.splits import DGSplit, default_protocol, make_splits, read_splits, write_splits
from privreid.data.types import Sample
from privreid.errors import ConfigError, DataError
from privreid.evaluation.metrics import evaluate
from privreid.evaluation.metric_registry import summary_keys
from privreid.evaluation.model_eval import dataset_features

#: the ``--format`` names of a protocol other than the dataset's default: name -> (dataset format, protocol)
PROTOCOL_FORMATS = {"grid-crosscam": ("grid", "crosscam"), "caviar-crosscam": ("caviar", "crosscam"),
                    "cuhksysu-g100": ("cuhksysu", "g100")}


def is_dg_eval_format(fmt: str) -> bool:
    return fmt in DG_FORMATS or fmt in PROTOCOL_FORMATS


def resolve_eval_format(fmt: str) -> tuple[str, str]:
    """``--format`` -> ``(dataset format, protocol)`` (see the module docstring)."""
    if fmt in PROTOCOL_FORMATS:
        return PROTOCOL_FORMATS[fmt]
    if fmt not in DG_FORMATS:
        raise ConfigError(f"{fmt!r} is not a small DG benchmark format; choose one of: "
                          f"{', '.join([*DG_FORMATS, *PROTOCOL_FORMATS])}")
    return fmt, "fixed" if fmt == "cuhksysu" else default_protocol(fmt)


def rank_splits(features: dict[str, np.ndarray], splits: list[DGSplit], *, metric: str = "euclidean",
                ap: str = "torchreid") -> dict:
    """Mean / std over ``splits`` of R1/R5/R10/mAP/mINP, ranking with ``features[path]`` (``metric``, ``ap``:
    :func:`~privreid.evaluation.metrics.evaluate`).

    Returns ``{"rank1": mean, ..., "std": {"rank1": std, ...}, "splits": n, "per_split": [...]}``.
    """
    per_split = []
    for split in splits:
        result = evaluate(*_stack(features, split.query, split.gallery), metric=metric, ap=ap)
        per_split.append({k: float(result[k]) for k in summary_keys()})
    mean = {k: float(np.mean([r[k] for r in per_split])) for k in summary_keys()}
    std = {k: float(np.std([r[k] for r in per_split])) for k in summary_keys()}
    return {**mean, "std": std, "splits": len(splits), "per_split": per_split}


def rank_per_query_galleries(features: dict[str, np.ndarray], pairs: list[tuple[Sample, list[Sample]]], *,
                             metric: str = "euclidean", ap: str = "torchreid") -> dict:
    """Means over queries of R1/R5/R10/mAP/mINP when each query has its own gallery (CUHK-SYSU TestG100).

    Queries whose gallery holds no image of their identity are not counted
    (``num_valid_queries`` says how many were).
    """
    per_query = []
    for query, gallery in pairs:
        if not any(pid == query[1] for _, pid, _ in gallery):
            continue
        qf, gf, q_pids, g_pids, _, _ = _stack(features, [query], gallery)
        result = evaluate(qf, gf, q_pids, g_pids, np.zeros(1, np.int64), np.ones(len(gallery), np.int64),
                          metric=metric, ap=ap)
        per_query.append({k: float(result[k]) for k in summary_keys()})
    if not per_query:
        raise DataError("no query has its person in its gallery")
    return {k: float(np.mean([r[k] for r in per_query])) for k in summary_keys()} | {
        "num_valid_queries": len(per_query), "num_queries": len(pairs)}


def evaluate_dg_model(model: torch.nn.Module, root: str | os.PathLike, fmt: str, *, height: int, width: int,
                      device: torch.device | str = "cpu", flip: bool = False, metric: str = "euclidean",
                      ap: str = "torchreid", num_splits: int = 10, seed: int = 0,
                      splits_file: str | os.PathLike | None = None,
                      write_splits_to: str | os.PathLike | None = None, batch_size: int = 128,
                      interpolation: str = "bilinear") -> dict:
    """Evaluate ``model`` on the benchmark at ``root`` (``--format fmt``) under its protocol.

    ``flip``, ``metric`` and ``ap`` as ``evaluation.flip`` / ``eval_metric`` / ``eval_ap``; the result records them
    (``"evaluation"``, as ``summary.json``).  ``splits_file`` reuses splits written before (by ``write_splits_to`` or
    :func:`privreid.data.formats.dg.splits.write_splits`) instead of drawing ``num_splits`` seeded ones.  The result
    has ``"protocol"`` and, for split protocols, the mean / std of :func:`rank_splits`.  ``interpolation`` is the test
    resize.
    """
    dataset_fmt, protocol = resolve_eval_format(fmt)
    pool = load_pool(root, dataset_fmt)

    def extract(samples: list[Sample]) -> dict[str, np.ndarray]:
        unique = list(dict.fromkeys(path for path, _, _ in samples))
        feats, _, _ = dataset_features(model, ImageDataset([(p, 0, 0) for p in unique],
                                                           build_transforms(height, width, train=False,
                                                                            interpolation=interpolation)),
                                       batch_size=batch_size, device=device, flip=flip)
        return dict(zip(unique, feats.cpu().numpy()))

    settings = {"protocol": protocol, "evaluation": {"metric": metric, "flip": flip, "ap": ap}}
    if protocol == "fixed":
        from privreid.data.formats.dg.cuhksysu import read_fixed_set

        query, gallery = read_fixed_set(Path(pool.root))
        result = evaluate(*_stack(extract(query + gallery), query, gallery), metric=metric, ap=ap)
        return {**settings, **{k: float(result[k]) for k in summary_keys()}, "num_query": len(query),
                "num_gallery": len(gallery)}
    if protocol == "g100":
        from privreid.data.formats.dg.cuhksysu import read_g100

        pairs = read_g100(Path(pool.root))
        features = extract([q for q, _ in pairs] + [g for _, gallery in pairs for g in gallery])
        return {**settings, **rank_per_query_galleries(features, pairs, metric=metric, ap=ap)}
    if splits_file is not None:
        splits = read_splits(splits_file, pool)
    else:
        splits = make_splits(pool, protocol, num_splits=num_splits, seed=seed)
    if write_splits_to is not None:
        write_splits(write_splits_to, pool, splits)
    features = extract([s for split in splits for s in split.query + split.gallery])
    return {**settings, "seed": splits[0].seed, **rank_splits(features, splits, metric=metric, ap=ap)}


def _stack(features: dict[str, np.ndarray], query: list[Sample], gallery: list[Sample]):
    def block(samples: list[Sample]):
        return (np.stack([features[p] for p, _, _ in samples]), np.array([pid for _, pid, _ in samples]),
                np.array([cam for _, _, cam in samples]))

    (qf, qp, qc), (gf, gp, gc) = block(query), block(gallery)
    return qf, gf, qp, gp, qc, gc
