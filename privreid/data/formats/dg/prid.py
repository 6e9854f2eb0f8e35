"""PRID2011, single-shot (Hirzer et al., SCIA 2011): 385 people in camera A, 749 in camera B, 200 in both.

torchreid's layout: ``prid2011/prid_2011/single_shot/{cam_a,cam_b}/person_<pid:04d>.png``.
Only persons 1-200 are the same people in both cameras (the release's
readme; numbers above 200 name different people in each camera): they are
paired; camera B's persons 201-749 are gallery distractors; camera A's
persons 201-385 are train-only identities (one view), as in the DGD
conversion FedPav trains on (Cysu/dgd_person_reid ``data/format_prid.py``),
where torchreid leaves them out.  View A (query) is ``cam_a``, view B (gallery) ``cam_b``.
When the release's ``multi_shot/{cam_a,cam_b}/person_<pid:04d>/*.png``
sequences sit beside ``single_shot/``, they are the pool's ``frames``
(FedPav's clients train on them).
"""

from __future__ import annotations

import re
from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, bad_name, images

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
    return DGPool("prid", str(base), views, distractors=distractors, frames=_frames(base.parent / "multi_shot", views))


def _frames(folder: Path, views: dict) -> dict:
    """Each identity's ``multi_shot`` frames per camera (none when the release has no ``multi_shot/`` there);
    camera B's sequence only for the paired persons (above 200, a number names another person in each camera)."""
    if not folder.is_dir():
        return {}
    frames = {}
    for pid in views:
        cams = ("cam_a", "cam_b") if pid <= PAIRED else ("cam_a",)
        sequences = [folder / cam / f"person_{pid:04d}" for cam in cams]
        found = [[(str(p), pid, camid) for p in images(seq, (".png",))] if seq.is_dir() else []
                 for camid, seq in enumerate(sequences)]
        frames[pid] = (found[0], found[1] if len(found) > 1 else [])
    return frames
