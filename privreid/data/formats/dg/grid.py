"""GRID (Loy et al., CVPR 2009): 250 paired identities in 8 underground cameras, plus 775 distractors.

torchreid's layout: ``grid/underground_reid/{probe,gallery}/*.jpeg`` named
``<pid:04d>_<cam>_...jpeg`` (``0001_1_25004_107_32_106_221.jpeg``); pid 0000
marks the gallery's distractors.  View A (query) is ``probe/``, view B
(gallery) ``gallery/``; cameras are 0-based (``_1_`` -> 0).
"""

from __future__ import annotations

import re
from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, bad_name, images, views_by_identity

RELEASE = ReleaseTree(
    "root/underground_reid/{probe,gallery}/<pid:04d>_<cam>_....jpeg (e.g. "
    "0001_1_25004_107_32_106_221.jpeg; pid 0000 = gallery distractor; the grid/ level is optional)",
    levels=("grid/underground_reid", "underground_reid", ""), holding=("probe", "gallery"))
_NAME = re.compile(r"(\d+)_(\d+)_")


def read_pool(base: Path) -> DGPool:
    viewed, distractors = [], []
    for view, folder in enumerate(("probe", "gallery")):
        for path in images(base / folder, (".jpeg", ".jpg")):
            match = _NAME.match(path.name)
            if match is None or int(match.group(2)) < 1:
                raise bad_name(path, "<pid>_<camera>_... (camera from 1)")
            sample = (str(path), int(match.group(1)), int(match.group(2)) - 1)
            if sample[1] == 0:
                distractors.append(sample)
            else:
                viewed.append((view, sample))
    return DGPool("grid", str(base), views_by_identity(viewed), distractors=distractors)
