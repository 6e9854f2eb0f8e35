"""CAVIAR4REID (Cheng et al., BMVC 2011): 72 people in a shopping centre, 50 of them in both of 2 cameras.

Not in torchreid.  The release is ``CAVIAR4REID/CAVIARa/<pid:04d><n:03d>.jpg``
(``0001001.jpg``): images 1-10 of an identity come from the first camera,
11-20 from the second.  View A (query) is the first camera.  A ``dg`` split
tests on 36 of the 50 people seen by both cameras (FedReID's Table I: half
of all 72 people; :mod:`~privreid.data.formats.dg.splits`); the 22 people
seen by one camera only are trained on and never tested.
"""

from __future__ import annotations

from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, numbered_views

RELEASE = ReleaseTree(
    "root/CAVIARa/<pid:04d><n:03d>.jpg (e.g. 0001001.jpg; images 001-010 camera 1, 011-020 camera 2; "
    "the CAVIAR4REID/ level is optional)",
    levels=("CAVIAR4REID/CAVIARa", "CAVIARa"))
IMAGES_PER_CAMERA = 10


def read_pool(base: Path) -> DGPool:
    return DGPool("caviar", str(base), numbered_views(base, ".jpg", IMAGES_PER_CAMERA))
