"""CUHK01 (Li et al., ACCV 2012): 971 people, two images in each of two campus views.

torchreid's layout: ``cuhk01/campus/<pid:04d><n:03d>.png`` (``0001001.png``);
images 1-2 are view A (query), 3-4 view B (gallery), as torchreid assigns them.
Its default protocol tests both images of view A against both of view B
(``crosscam``, :func:`~privreid.data.formats.dg.splits.default_protocol`), as
torchreid and FedPav's data preparation do.
"""

from __future__ import annotations

from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, numbered_views

RELEASE = ReleaseTree(
    "root/campus/<pid:04d><n:03d>.png (e.g. 0001001.png; n 001-002 view A, 003-004 view B; cuhk01/ optional)",
    levels=("cuhk01/campus", "campus"))
IMAGES_PER_VIEW = 2


def read_pool(base: Path) -> DGPool:
    return DGPool("cuhk01", str(base), numbered_views(base, ".png", IMAGES_PER_VIEW))
