"""CUHK-SYSU (Xiao et al., CVPR 2017), as cropped person images.

torchreid's layout: ``cuhksysu/cropped_images/p<pid>_s<scene>_<n>.jpg``, one crop per annotated box of scene
``s<scene>.jpg`` (torchreid trains on it only). Both test protocols start from the release's
``annotation/test/train_test/TestG100.mat``: 2,900 queries, each with a gallery of 100 scenes. FedReID's test
(paper 002, Sec. IV-A, Table I; :func:`read_fixed_set`): the query crops against one fixed gallery of the query
persons' crops in their gallery scenes, "removing distractors in the variable gallery sets" (2,900 identities,
8,347 images). TestG100 (:func:`read_g100`): a query's gallery is every crop of its 100 scenes. Train: every crop
of the people never queried. No camera labels: camid 0, and a query never meets its own crop.
"""

from __future__ import annotations

import re
from pathlib import Path

from privreid.data.types import Sample
from privreid.errors import DataError

from privreid.data.formats.dg.common import DGPool, ReleaseTree, bad_name, images, views_by_identity

RELEASE = ReleaseTree(
    "root/cropped_images/p<pid>_s<scene>_<n>.jpg (e.g. p11422_s16929_1.jpg) + "
    "root/annotation/test/train_test/TestG100.mat (the cuhksysu/ level is optional)",
    levels=("cuhksysu", ""), holding=("cropped_images",))
PROTOCOL_FILE = Path("annotation") / "test" / "train_test" / "TestG100.mat"
_NAME = re.compile(r"p(\d+)_s(\d+)_\d+\.jpg")


def _crops(base: Path) -> list[tuple[Sample, int]]:
    crops = []
    for path in images(base / "cropped_images", (".jpg",)):
        match = _NAME.fullmatch(path.name)
        if match is None:
            raise bad_name(path, "p<pid>_s<scene>_<n>.jpg")
        crops.append(((str(path), int(match.group(1)), 0), int(match.group(2))))
    return crops


def read_g100(base: Path) -> list[tuple[Sample, list[Sample]]]:
    """The 2,900 ``(query crop, gallery crops)`` pairs of ``TestG100.mat`` (see the module docstring)."""
    from scipy.io import loadmat

    path = base / PROTOCOL_FILE
    if not path.is_file():
        raise DataError(f"missing {path}; cuhksysu expects {RELEASE.layout}")
    try:
        entries = loadmat(str(path), simplify_cells=True)["TestG100"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"cannot read the TestG100 protocol from {path}: {exc}") from exc
    crops = _crops(base)
    by_scene: dict[int, list[Sample]] = {}
    query_crop: dict[tuple[int, int], Sample] = {}
    for sample, scene in crops:
        by_scene.setdefault(scene, []).append(sample)
        query_crop.setdefault((sample[1], scene), sample)
    pairs = []
    for entry in entries if isinstance(entries, list) else [entries]:
        query, gallery = entry["Query"], entry["Gallery"]
        gallery = gallery if isinstance(gallery, list) else [gallery]
        pid, scene = _number(query["idname"], "p"), _number(query["imname"], "s")
        if (pid, scene) not in query_crop:
            raise DataError(f"{path}: the query {query['idname']} in {query['imname']} has no crop "
                            f"p{pid}_s{scene}_<n>.jpg in {base / 'cropped_images'}")
        scenes = [_number(g["imname"], "s") for g in gallery]
        pairs.append((query_crop[(pid, scene)], [s for k in scenes for s in by_scene.get(k, [])]))
    return pairs


def read_fixed_set(base: Path) -> tuple[list[Sample], list[Sample]]:
    """FedReID's ``(query, gallery)`` (module docstring): query crops with camid 0, gallery crops with camid 1,
    each once: a query's own person in its TestG100 gallery scenes (so no query crop)."""
    pairs = read_g100(base)
    gallery = dict.fromkeys(g for query, crops in pairs for g in crops if g[1] == query[1])
    return [(path, pid, 0) for (path, pid, _), _ in pairs], [(path, pid, 1) for path, pid, _ in gallery]


def read_pool(base: Path) -> DGPool:
    crops = views_by_identity((0, sample) for sample, _ in _crops(base))
    views = {pid: (own, own) for pid, (own, _) in crops.items()}
    fixed = sorted({q[1] for q, _ in read_g100(base)}) if (base / PROTOCOL_FILE).is_file() else None
    return DGPool("cuhksysu", str(base), views, shared_view=True, fixed_test=fixed)


def _number(name: str, prefix: str) -> int:
    """``"p5001"`` -> 5001, ``"s15535.jpg"`` -> 15535."""
    match = re.fullmatch(rf"{prefix}(\d+)(\.jpg)?", str(name))
    if match is None:
        raise DataError(f"TestG100.mat: expected a name like {prefix}123, got {name!r}")
    return int(match.group(1))
