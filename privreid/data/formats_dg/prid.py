"""PRID2011, single-shot (Hirzer et al., SCIA 2011): 385 people in camera A, 749 in camera B, 200 in both.

torchreid's layout: ``prid2011/prid_2011/single_shot/{cam_a,cam_b}/person_<pid:04d>.png``.
Only persons 1-200 are the same people in both cameras (the release's
readme; numbers above 200 name different people in each camera): they are
paired; camera B's persons 201-749 are gallery distractors; camera A's
persons 201-385 are train-only identities (one view), as in the DGD
conversion FedPav trains on (Cysu/dgd_person_reid ``data/format_prid.py``),
where torchreid leaves them out.  View A (query) is ``cam_a``, view B (gallery) ``cam_b``.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import DGPool, ReleaseTree, bad_name, images

RELEASE = ReleaseTree(
    "root/prid_2011/single_shot/{cam_a,cam_b}/person_<pid:04d>.png (e.g. person_0001.png; "
    "the prid2011/ level is optional)",
    levels=("prid2011/prid_2011/single_shot", "prid_2011/single_shot", "single_shot", ""), holding=("cam_a", "cam_b"))
PAIRED = 200  # persons 1..200 appear in both cameras
_NAME = re.compile(r"person_(\d+)\.png")


def read_pool(base: Path) -> DGPool:
    cams = []
    for camid, folder in enumerate(("cam_a", "cam_b")):
        found = {}
        for path in images(base / folder, (".png",)):
            match = _NAME.fullmatch(path.name)
            if match is None:
                raise bad_name(path, "person_<pid:04d>.png")
            found[int(match.group(1))] = (str(path), int(match.group(1)), camid)
        cams.append(found)
    a, b = cams
    views = {pid: ([a[pid]], [b[pid]]) for pid in sorted(a.keys() & b.keys()) if pid <= PAIRED}
    distractors = [b[pid] for pid in sorted(b) if pid not in views]
    views |= {pid: ([a[pid]], []) for pid in sorted(a) if pid > PAIRED}
    return DGPool("prid", str(base), views, distractors=distractors)
