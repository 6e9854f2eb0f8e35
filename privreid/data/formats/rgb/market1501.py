"""Market-1501 (Zheng et al., ICCV 2015): image folders named ``<pid>_c<cam>s<seq>_<frame>_<box>.jpg``.

Parsed as torchreid's ``Market1501`` (regex ``([-\\d]+)_c(\\d)``): junk (pid
-1) dropped, distractors (pid 0) kept in the gallery, cameras made 0-based.
Recognised by its release folder ``Market-1501-v15.09.15/`` or, after every
other format, by bare split folders whose file names are not DukeMTMC-reID's.
"""

from __future__ import annotations

from pathlib import Path

from privreid.data.types import ReIDDataset

from privreid.data.formats.base import DETECT_RELEASE, DatasetFormat, check_root, has_duke_names, has_market_folders, \
    load_market_layout, subfolder

RELEASE = "Market-1501-v15.09.15"
LAYOUT = ("root/{bounding_box_train,query,bounding_box_test}/*.jpg named <pid>_c<cam>s<seq>_<frame>_<box>.jpg "
          "(e.g. 0002_c1s1_000451_03.jpg; pid -1 = junk, 0000 = distractor), cameras c1-c6; "
          "the folders may sit in root/Market-1501-v15.09.15/")


def load(root: Path, variant: str | None = None) -> ReIDDataset:
    return load_market_layout("market1501", subfolder(check_root(root), (RELEASE,)), (".jpg",))


FORMAT = DatasetFormat(
    "market1501", LAYOUT, detect=lambda root: (root / RELEASE).is_dir(), load=load, priority=DETECT_RELEASE,
    family="rgb", loose_detect=lambda root: has_market_folders(root) and not has_duke_names(root))
