"""CUHK02 (Li & Wang, CVPR 2013): 1,816 people in five camera pairs P1-P5.

torchreid's layout: ``cuhk02/Dataset/P<k>/{cam1,cam2}/<pid>_<n>.png``; the
identity is the first ``_`` field and identities of different pairs are
different people, so privreid's pid is ``100000 * (k - 1) + pid``.  The
camids run over the ten cameras (``P1/cam1`` -> 0, ``P1/cam2`` -> 1, ...), as in
torchreid.  The one released split is torchreid's: P1-P4 train, P5 test
(every ``cam1`` image a query, every ``cam2`` image in the gallery).
"""

from __future__ import annotations

import re
from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, bad_name, images, views_by_identity

RELEASE = ReleaseTree(
    "root/Dataset/P{1..5}/{cam1,cam2}/<pid>_<n>.png (e.g. 001_1.png; the cuhk02/ level is optional)",
    levels=("cuhk02/Dataset", "Dataset"), holding=("P1/cam1",))
PAIRS = ("P1", "P2", "P3", "P4", "P5")
TEST_PAIR = "P5"
_NAME = re.compile(r"(\d+)_")


def read_pool(base: Path) -> DGPool:
    viewed, test = [], []
    for k, pair in enumerate(PAIRS):
        if not (base / pair).is_dir():
            continue
        for c, cam in enumerate(("cam1", "cam2")):
            for path in images(base / pair / cam, (".png",)):
                match = _NAME.match(path.name)
                if match is None:
                    raise bad_name(path, "<pid>_<n>.png")
                pid = 100000 * k + int(match.group(1))
                viewed.append((c, (str(path), pid, 2 * k + c)))
                if pair == TEST_PAIR:
                    test.append(pid)
    return DGPool("cuhk02", str(base), views_by_identity(viewed), fixed_test=sorted(set(test)))
