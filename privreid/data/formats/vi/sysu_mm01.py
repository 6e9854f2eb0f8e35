"""SYSU-MM01 (Wu et al., ICCV 2017), all-search (``sysu-mm01``) and indoor-search (``sysu-mm01-indoor``).

``SYSU-MM01/cam{1..6}/<pid:04d>/<n:04d>.jpg`` and ``exp/{train,val,test}_id.txt``
(comma-separated identity numbers).  Cameras 1, 2, 4, 5 are visible, 3 and
6 infrared.  Train = train + val identities, every camera.  Query = the
test identities' infrared images (cameras 3, 6); gallery = their visible
images, cameras 1, 2, 4, 5 (all-search) or 1, 2 (indoor-search).  Protocol:
10 single-shot gallery trials (one image per identity and camera), CMC by
identity, and queries of camera 3 ignore camera 2 (same room), as the
dataset's released evaluation (and AGW's ``eval_sysu``) does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from privreid.data.formats.base import DETECT_FIRST, DatasetFormat, check_root, subfolder
from privreid.data.types import INFRARED, VISIBLE, ReIDDataset, Sample, VIProtocol
from privreid.errors import ConfigError

from privreid.data.formats.vi.common import marker, read_ids, vi_dataset, walk_identity_folders

LAYOUT = ("root/cam{1..6}/<pid:04d>/*.jpg + root/exp/{train,val,test}_id.txt; all-search "
          "(the folders may sit in root/SYSU-MM01/)")
INDOOR_LAYOUT = "SYSU-MM01 (same layout), indoor-search: visible gallery of cameras 1-2"

#: SYSU-MM01: camera number -> modality
_SYSU_CAMERAS = {1: VISIBLE, 2: VISIBLE, 3: INFRARED, 4: VISIBLE, 5: VISIBLE, 6: INFRARED}
_SYSU_GALLERY = {"all": (1, 2, 4, 5), "indoor": (1, 2)}
#: the released evaluation code of SYSU-MM01: 10 single-shot trials, CMC over identities
_SYSU_PROTOCOL = VIProtocol(gallery_trials=10, cmc_by_identity=True, colocated_cameras=((1, 2),))


def load_sysu_mm01(root: str | os.PathLike, mode: str = "all") -> ReIDDataset:
    """SYSU-MM01, ``mode`` ``"all"`` (all-search) or ``"indoor"`` (indoor-search); see the module docstring."""
    if mode not in _SYSU_GALLERY:
        raise ConfigError(f"SYSU-MM01 mode must be 'all' or 'indoor', got {mode!r}")
    base = subfolder(check_root(root), ("SYSU-MM01",))
    train_ids = read_ids(base / "exp" / "train_id.txt") + read_ids(base / "exp" / "val_id.txt")
    test_ids = read_ids(base / "exp" / "test_id.txt")
    modality: dict[str, str] = {}

    def images(ids: list[int], cams: Iterable[int]) -> list[Sample]:
        folders = [(base / f"cam{cam}", cam - 1, _SYSU_CAMERAS[cam]) for cam in cams]
        return walk_identity_folders(folders, ids, modality)

    train = images(train_ids, _SYSU_CAMERAS)
    query = images(test_ids, [cam for cam, m in _SYSU_CAMERAS.items() if m == INFRARED])
    gallery = images(test_ids, _SYSU_GALLERY[mode])
    name = "sysu-mm01" if mode == "all" else "sysu-mm01-indoor"
    return vi_dataset(name, base, train, query, gallery, modality, _SYSU_PROTOCOL)


#: auto-detection reads SYSU-MM01 as all-search; ``sysu-mm01-indoor`` is only chosen by name
FORMAT = DatasetFormat("sysu-mm01", LAYOUT, marker("SYSU-MM01", "exp", "test_id.txt"),
                       lambda root, variant=None: load_sysu_mm01(root, "all"), priority=DETECT_FIRST, family="vi")
INDOOR_FORMAT = DatasetFormat("sysu-mm01-indoor", INDOOR_LAYOUT, None,
                              lambda root, variant=None: load_sysu_mm01(root, "indoor"), family="vi")
