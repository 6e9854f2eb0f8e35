"""Train / test splits of the small benchmarks: the DG-ReID protocol, FedPav's client split, the cross-camera protocol.

``dg`` -- the small-set protocol of Song et al. (CVPR 2019, Sec. 4.1), used by
FedReID (paper 002, Sec. 4) and SKA (paper 000, Sec. 4.1): each of 10 random
splits tests on half of the identities seen in both views (rounded up: PRID
100 of its 200 paired people, GRID 125 of 250, VIPeR 316 of 632, i-LIDS 60
of 119), single-shot (one query image from view A and one gallery image from
view B per test identity; two distinct images for i-LIDS), the gallery
completed with the dataset's distractors (PRID 549 camera-B-only people ->
649 gallery images, GRID 775 -> 900).  CAVIAR4REID tests on half of all its
72 people, drawn among the 50 seen by both cameras (36, not 25): FedReID's
Table I lists 36 test identities and 72 test images, and its Table II
compares with DSTML and UMDL, whose protocol draws 36 identities seen by two
cameras (as FedPav, paper 004 Sec. 5.4, states it).  The other identities
(and those seen in one view) are the split's train set.  Results are the
mean and std over the splits (:mod:`privreid.evaluation.dg_protocol`).

``fedpav`` -- FedPav's nine-client split (paper 004, Table 1), as its
authors' code prepares it (cap-ntu/FedReID ``data_preprocess``, which reads
the ``meta.json`` / ``split.json`` of Xiao et al.'s DGD conversion scripts,
Cysu/dgd_person_reid ``data/format_*.py``): the test identities are a random
half of the identities (rounded up: VIPeR 316, CUHK01 486, i-LIDS 60), 100
for 3DPeS and 100 of PRID's 200 paired people; every other identity trains,
with all its images (FedPav trains on ``train_all`` = DGD's ``trainval``:
PRID 285 people, its 185 camera-A-only ones included; where the PRID
release's ``multi_shot`` sequences are present, a train person's images are
up to 10 frames drawn from each camera's sequence, as DGD draws them).  The query is every
view-A image of the test identities and the gallery every view-B image (DGD's
"first half views are probe") plus the distractors (PRID: 649 gallery images);
a test identity seen in one view only is gallery-only (DGD puts 3DPeS' one-
camera people in ``cam_1``); an i-LIDS identity's images are shuffled and
halved, the first ``n // 2`` as query.  The release's ``split.json`` files
are not published, so privreid draws its own (seeded) split.

``crosscam`` -- every image of view A as query and every image of view B as
the gallery, no distractors.  FedPav's Table 5 (paper 004, Sec. 5.4) draws
CAVIAR4REID's 36 identities seen by both cameras (as [32, 38]) and all of
GRID's 250 (the paper does not mention GRID's distractors); privreid draws
10 such sets and averages, where the paper reports one draw.  It is also the
default protocol of CUHK01 and CUHK02 (:func:`default_protocol`), as
torchreid's loaders test them (CUHK01: half of the 971 people, rounded up,
each with its two view-A images as queries and its two view-B images in the
gallery, the sizes of FedPav's Table 1 too: 486 identities, 972 query and
972 gallery images; CUHK02: the P5 pair, every ``cam1`` image against every
``cam2`` image).

Datasets with one released split (:attr:`DGPool.fixed_test`: CUHK02's P5,
CUHK-SYSU's query identities) test on it in every split.  Query images get
camid 0 and gallery images camid 1 (the views are different cameras), so
the Market-1501 same-camera rule never removes a true match.  A split is
reproducible from ``(seed, index)`` and written to JSON by
:func:`write_splits` for reuse (:func:`read_splits`).
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
        splits = [DGSplit(index=s["index"], seed=s["seed"], protocol=s["protocol"], train_ids=s["train_ids"],
                          test_ids=s["test_ids"],
                          query=[(os.path.join(pool.root, p), pid, cam) for p, pid, cam in s["query"]],
                          gallery=[(os.path.join(pool.root, p), pid, cam) for p, pid, cam in s["gallery"]])
                  for s in body["splits"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"cannot read splits from {path}: {exc}") from exc
    known = {pid for pid in pool.views}
    for split in splits:
        missing = [p for p, _, _ in split.query + split.gallery if not os.path.isfile(p)]
        if missing or not set(split.train_ids) <= known:
            raise DataError(f"{path}: split {split.index} does not match {pool.name} at {pool.root}")
    return splits
