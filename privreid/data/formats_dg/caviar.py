"""CAVIAR4REID (Cheng et al., BMVC 2011): 72 people in a shopping centre, 50 of them in both of 2 cameras.

Not in torchreid.  The release is ``CAVIAR4REID/CAVIARa/<pid:04d><n:03d>.jpg``
(``0001001.jpg``): images 1-10 of an identity come from the first camera,
11-20 from the second.  View A (query) is the first camera.  The 22 people
seen by one camera only are trained on and never tested.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import DGPool, bad_name, images, two_views

LAYOUT = ("root/CAVIARa/<pid:04d><n:03d>.jpg (e.g. 0001001.jpg; images 001-010 camera 1, 011-020 camera 2; "
          "the CAVIAR4REID/ level is optional)")
_NAME = re.compile(r"(\d{4})(\d{3})\.jpg")
IMAGES_PER_CAMERA = 10


def find(root: Path) -> Path | None:
    for base in (root / "CAVIAR4REID" / "CAVIARa", root / "CAVIARa"):
        if base.is_dir():
            return base
    return None


def read_pool(base: Path) -> DGPool:
    samples = []
    for path in images(base, (".jpg",)):
        match = _NAME.fullmatch(path.name)
        if match is None or int(match.group(2)) < 1:
            raise bad_name(path, "<pid:04d><n:03d>.jpg (n from 001)")
        samples.append((str(path), int(match.group(1)), (int(match.group(2)) - 1) // IMAGES_PER_CAMERA))
    return DGPool("caviar", str(base), two_views(samples, {0}))
