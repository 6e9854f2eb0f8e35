"""CUHK01 (Li et al., ACCV 2012): 971 people, two images in each of two campus views.

torchreid's layout: ``cuhk01/campus/<pid:04d><n:03d>.png`` (``0001001.png``);
images 1-2 are view A (query), 3-4 view B (gallery), as torchreid assigns them.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import DGPool, bad_name, images, two_views

LAYOUT = "root/campus/<pid:04d><n:03d>.png (e.g. 0001001.png; n 001-002 view A, 003-004 view B; cuhk01/ optional)"
_NAME = re.compile(r"(\d{4})(\d{3})\.png")


def find(root: Path) -> Path | None:
    for base in (root / "cuhk01" / "campus", root / "campus"):
        if base.is_dir():
            return base
    return None


def read_pool(base: Path) -> DGPool:
    samples = []
    for path in images(base, (".png",)):
        match = _NAME.fullmatch(path.name)
        if match is None or int(match.group(2)) < 1:
            raise bad_name(path, "<pid:04d><n:03d>.png (n from 001)")
        samples.append((str(path), int(match.group(1)), (int(match.group(2)) - 1) // 2))
    return DGPool("cuhk01", str(base), two_views(samples, {0}))
