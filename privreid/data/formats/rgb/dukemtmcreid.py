"""DukeMTMC-reID (Ristani et al., 2016; Zheng et al., ICCV 2017): Market-1501's layout, ``<pid>_c<cam>_f<frame>.jpg``.

Recognised by its release folder ``DukeMTMC-reID/`` or, after every other
format, by bare Market-style split folders whose first image is named
``0001_c2_f0046182.jpg`` (Market-1501 names carry a sequence number).
"""

from __future__ import annotations

from pathlib import Path

from privreid.data.types import ReIDDataset

from privreid.data.formats.base import DETECT_RELEASE, DatasetFormat, check_root, has_duke_names, has_market_folders, \
    load_market_layout, subfolder

RELEASE = "DukeMTMC-reID"
LAYOUT = ("root/{bounding_box_train,query,bounding_box_test}/*.jpg named <pid>_c<cam>_f<frame>.jpg "
          "(e.g. 0001_c2_f0046182.jpg), cameras c1-c8; the folders may sit in root/DukeMTMC-reID/")


def load(root: Path, variant: str | None = None) -> ReIDDataset:
    return load_market_layout("dukemtmcreid", subfolder(check_root(root), (RELEASE,)), (".jpg",))


FORMAT = DatasetFormat(
    "dukemtmcreid", LAYOUT, detect=lambda root: (root / RELEASE).is_dir(), load=load, priority=DETECT_RELEASE,
    family="rgb", loose_detect=lambda root: has_market_folders(root) and has_duke_names(root))
