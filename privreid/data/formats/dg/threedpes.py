"""3DPeS (Baltieri et al., 2011): snapshots of ~190 people in 8 outdoor cameras.

Not in torchreid.  The release's re-identification snapshots are
``3DPeS/RGB/<pid>_<camera>_<...>.bmp``; the identity and the camera are the
first two ``_``-separated fields, as in the DGD / FedReID conversion scripts.
Those scripts put a random half of each identity's camera views in "cam_0";
privreid instead puts an identity's lowest-numbered camera in view A (query)
and its other cameras in view B (gallery), so that the split depends on the
split seed only.  Camera numbers become 0-based camids.
"""

from __future__ import annotations

import re
from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, bad_name, images

RELEASE = ReleaseTree(
    "root/3DPeS/RGB/<pid>_<camera>_<...>.bmp (e.g. 001_1_20100611_0001.bmp; the 3DPeS/ level is optional)",
    levels=("3DPeS/RGB", "RGB"))
_NAME = re.compile(r"(\d+)_(\d+)_")


def read_pool(base: Path) -> DGPool:
    by_pid: dict[int, list] = {}
    for path in images(base, (".bmp",)):
        match = _NAME.match(path.name)
        if match is None or int(match.group(2)) < 1:
            raise bad_name(path, "<pid>_<camera>_... (camera from 1)")
        pid = int(match.group(1))
        by_pid.setdefault(pid, []).append((str(path), pid, int(match.group(2)) - 1))
    views = {}
    for pid, samples in by_pid.items():
        first = min(cam for _, _, cam in samples)
        views[pid] = ([s for s in samples if s[2] == first], [s for s in samples if s[2] != first])
    return DGPool("3dpes", str(base), views)
