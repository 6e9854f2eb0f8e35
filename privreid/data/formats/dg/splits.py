"""Train / test splits of the small benchmarks: the DG-ReID protocol, FedPav's client split, the cross-camera protocol.

``dg``: Song et al.'s small-set protocol (CVPR 2019, Sec. 4.1), used by FedReID (paper 002, Sec. 4) and SKA
(paper 000, Sec. 4.1): each of 10 random splits tests on half of the identities seen in both views (rounded up:
PRID 100 of 200 paired, GRID 125 of 250, VIPeR 316 of 632, i-LIDS 60 of 119), single-shot (one view-A query,
one view-B gallery image per identity; two distinct images for i-LIDS), the gallery completed with distractors
(PRID 549 -> 649 gallery images, GRID 775 -> 900). CAVIAR4REID tests on 36 of the 50 people both cameras see
(FedReID's Table I: 36 identities, 72 images; DSTML / UMDL's protocol, as FedPav Sec. 5.4 states). The rest
trains. Results: mean and std over the splits (:mod:`privreid.evaluation.dg_protocol`).

``fedpav``: FedPav's nine-client split (paper 004, Table 1) as its code prepares it (cap-ntu/FedReID
``data_preprocess`` on Xiao et al.'s DGD conversion, Cysu/dgd_person_reid): a random half of the identities
test (rounded up: VIPeR 316, CUHK01 486, i-LIDS 60), 100 for 3DPeS and 100 of PRID's 200 paired; every other
identity trains with all its images (``train_all`` = DGD's ``trainval``: PRID 285 people; with PRID's
``multi_shot`` sequences, up to 10 frames per camera, as DGD). Query: every view-A image of the test
identities; gallery: every view-B image plus distractors (PRID: 649); one-view test identities are
gallery-only; i-LIDS' images are shuffled, the first ``n // 2`` the query. DGD's ``split.json`` files are not
published: privreid draws its own seeded split.

``crosscam``: all view-A images query, all view-B images gallery, no distractors. FedPav's Table 5 (Sec. 5.4)
draws CAVIAR4REID's 36 two-camera identities and all of GRID's 250; privreid averages 10 draws where the paper
reports one. The default of CUHK01 and CUHK02 (:func:`default_protocol`), as torchreid tests them (CUHK01: 486
identities, 972 query and 972 gallery images, FedPav's Table 1 sizes; CUHK02: P5, ``cam1`` against ``cam2``).

Datasets with one released split (:attr:`DGPool.fixed_test`: CUHK02's P5, CUHK-SYSU's queries) use it in every
split. Query images get camid 0, gallery camid 1, so the same-camera rule never removes a true match. A split is
reproducible from ``(seed, index)`` and saved by :func:`write_splits` (:func:`read_splits`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from privreid.data.types import ReIDDataset, Sample, relabel
from privreid.errors import ConfigError, DataError
from privreid.io import write_text_atomic

from privreid.data.formats.dg.common import DGPool

if TYPE_CHECKING:  # numpy is imported where splits are drawn: the format registry (--help) needs none
    import numpy as np

SPLIT_PROTOCOLS = ("dg", "crosscam", "fedpav")
#: FedPav Table 5: identities drawn per cross-camera test (None: every paired identity)
CROSSCAM_IDS = {"caviar": 36, "grid": None}
#: the datasets with a cross-camera protocol: FedPav's Table 5, and torchreid's CUHK01 (half of the paired
#: identities, rounded up) and CUHK02 (its P5 pair)
CROSSCAM_DATASETS = (*CROSSCAM_IDS, "cuhk01", "cuhk02")
#: the datasets whose ``dg`` splits test on half of all their identities, not of the paired ones, drawn among
#: the paired ones (CAVIAR4REID: 36 of 72, FedReID's Table I)
HALF_OF_ALL = ("caviar",)
#: the datasets tested every image of view A against every image of view B by default
ALL_IMAGES = ("cuhk01", "cuhk02")
#: FedPav's small clients (Table 1): test identities drawn (None: half of all identities, rounded up); PRID draws
#: among its paired people, the others among all identities (Cysu/dgd_person_reid data/format_{prid,3dpes}.py)
FEDPAV_TEST_IDS = {"prid": 100, "cuhk01": None, "viper": None, "3dpes": 100, "ilids": None}
NUM_SPLITS = 10
#: FedPav's clients train on at most this many frames per camera of a sequence (Cysu/dgd_person_reid format_prid.py)
FEDPAV_FRAMES = 10


@dataclass
class DGSplit:
    index: int
    seed: int
    protocol: str
    train_ids: list[int]
    test_ids: list[int]
    query: list[Sample]
    gallery: list[Sample]


def default_protocol(fmt: str) -> str:
    """``crosscam`` for CUHK01 / CUHK02 (every image of view A against every image of view B), ``dg`` otherwise."""
    return "crosscam" if fmt in ALL_IMAGES else "dg"


def num_test_ids(pool: DGPool, protocol: str) -> int:
    """How many identities a split of ``protocol`` tests on (see the module docstring)."""
    paired = len(pool.paired_ids)
    if protocol == "fedpav":
        return min(FEDPAV_TEST_IDS[pool.name] or math.ceil(len(pool.views) / 2), len(_test_candidates(pool, protocol)))
    if protocol == "crosscam":
        if pool.name not in CROSSCAM_DATASETS:
            raise ConfigError(f"the cross-camera protocol is defined for {', '.join(CROSSCAM_DATASETS)}, "
                              f"not {pool.name}")
        if pool.name in CROSSCAM_IDS:
            return min(CROSSCAM_IDS[pool.name] or paired, paired)
    counted = len(pool.views) if protocol == "dg" and pool.name in HALF_OF_ALL else paired
    return min(math.ceil(counted / 2), paired)


def _test_candidates(pool: DGPool, protocol: str) -> list[int]:
    """The identities a split of ``protocol`` draws its test identities from (see the module docstring)."""
    if protocol == "fedpav":
        if pool.name not in FEDPAV_TEST_IDS:
            raise ConfigError(f"FedPav's client split is defined for {', '.join(FEDPAV_TEST_IDS)}, not {pool.name}")
        return pool.paired_ids if pool.name == "prid" else sorted(pool.views)
    return pool.paired_ids


def make_splits(pool: DGPool, protocol: str = "dg", *, num_splits: int = NUM_SPLITS, seed: int = 0) -> list[DGSplit]:
    """``num_splits`` splits of ``pool`` under ``protocol``; split ``i`` depends on ``(seed, i)`` only."""
    if protocol not in SPLIT_PROTOCOLS:
        raise ConfigError(f"unknown split protocol {protocol!r}; choose one of: {', '.join(SPLIT_PROTOCOLS)}")
    if num_splits < 1:
        raise ConfigError(f"the number of splits must be at least 1, got {num_splits}")
    if seed < 0:
        raise ConfigError(f"the split seed must be non-negative, got {seed}")
    return [_split(pool, protocol, seed, index) for index in range(num_splits)]


def _split(pool: DGPool, protocol: str, seed: int, index: int) -> DGSplit:
    import numpy as np

    rng = np.random.default_rng([seed, index])
    paired = pool.paired_ids
    if pool.fixed_test is not None:
        test = [pid for pid in pool.fixed_test if pid in set(paired)]
    else:
        candidates = _test_candidates(pool, protocol)
        order = rng.permutation(len(candidates))
        test = sorted(candidates[i] for i in order[: num_test_ids(pool, protocol)])
    if not test:
        raise DataError(f"{pool.name} at {pool.root}: no identity to test on")
    test_set = set(test)
    single = protocol == "dg"
    train_ids = sorted(pid for pid in pool.views if pid not in test_set)
    query, gallery = [], []
    for pid in test:
        view_a, view_b = pool.views[pid]
        if protocol == "fedpav":
            q, g = _fedpav_views(view_a, view_b, pool.shared_view, rng)
        elif pool.shared_view:
            first, second = rng.choice(len(view_a), size=2, replace=False)
            q = [view_a[first]]
            g = [view_a[second]] if single else [s for i, s in enumerate(view_a) if i != first]
        elif single:
            q, g = [view_a[rng.integers(len(view_a))]], [view_b[rng.integers(len(view_b))]]
        else:
            q, g = view_a, view_b
        query += [(path, pid, 0) for path, _, _ in q]
        gallery += [(path, pid, 1) for path, _, _ in g]
    if protocol in ("dg", "fedpav"):
        gallery += [(path, pid, 1) for path, pid, _ in pool.distractors]
    return DGSplit(index, seed, protocol, train_ids, test, query, gallery)


def _fedpav_views(view_a: list[Sample], view_b: list[Sample], shared: bool,
                  rng: np.random.Generator) -> tuple[list[Sample], list[Sample]]:
    """A FedPav test identity's query and gallery images (see the module docstring)."""
    if shared:
        order = rng.permutation(len(view_a))
        return [view_a[i] for i in order[: len(view_a) // 2]], [view_a[i] for i in order[len(view_a) // 2:]]
    if not view_a or not view_b:
        return [], view_a + view_b
    return view_a, view_b


def train_samples(pool: DGPool, split: DGSplit) -> list[Sample]:
    """Every image of the split's train identities, with its own camid (views A and B once each); FedPav's
    split takes up to :data:`FEDPAV_FRAMES` frames per view from the pool's ``frames`` where it has them."""
    import numpy as np

    rng = np.random.default_rng([split.seed, split.index, 1])
    out = []
    for pid in split.train_ids:
        view_a, view_b = pool.views[pid]
        if split.protocol == "fedpav" and any(pool.frames.get(pid, ())):
            out += [s for frames in pool.frames[pid] for s in _draw(frames, rng)]
        else:
            out += view_a if pool.shared_view else view_a + view_b
    return out


def _draw(frames: list[Sample], rng: np.random.Generator) -> list[Sample]:
    """Up to :data:`FEDPAV_FRAMES` of ``frames``, drawn without replacement, in frame order."""
    keep = rng.choice(len(frames), size=min(FEDPAV_FRAMES, len(frames)), replace=False)
    return [frames[i] for i in sorted(keep)]


def split_dataset(pool: DGPool, split: DGSplit) -> ReIDDataset:
    """``split`` as a :class:`ReIDDataset`: train relabelled ``0..N-1``, query / gallery with their pids."""
    return ReIDDataset(name=pool.name, train=relabel(train_samples(pool, split)), query=split.query, gallery=split.gallery,
                       root=pool.root)


def write_splits(path: str | os.PathLike, pool: DGPool, splits: list[DGSplit]) -> Path:
    """Write ``splits`` as JSON, image paths relative to the dataset root (so the file moves with the data)."""
    def rel(samples: list[Sample]) -> list[list]:
        return [[os.path.relpath(p, pool.root), pid, cam] for p, pid, cam in samples]

    body = {"dataset": pool.name, "splits": [{**asdict(s), "query": rel(s.query), "gallery": rel(s.gallery)}
                                             for s in splits]}
    path = Path(path)
    write_text_atomic(path, json.dumps(body, indent=1))
    return path


def read_splits(path: str | os.PathLike, pool: DGPool) -> list[DGSplit]:
    """The splits of :func:`write_splits`, checked against ``pool`` (same dataset, every image present)."""
    try:
        body = json.loads(Path(path).read_text())
        if body["dataset"] != pool.name:
            raise DataError(f"{path} holds splits of {body['dataset']}, not of {pool.name}")
        splits = [DGSplit(**{**s, **{k: [(os.path.join(pool.root, p), pid, cam) for p, pid, cam in s[k]]
                                     for k in ("query", "gallery")}}) for s in body["splits"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"cannot read splits from {path}: {exc}") from exc
    known = {pid for pid in pool.views}
    for split in splits:
        missing = [p for p, _, _ in split.query + split.gallery if not os.path.isfile(p)]
        if missing or not set(split.train_ids) <= known:
            raise DataError(f"{path}: split {split.index} does not match {pool.name} at {pool.root}")
    return splits
