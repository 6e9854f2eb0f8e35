"""QMUL i-LIDS (Zheng et al., BMVC 2009): 476 images of 119 people, no camera labels.

torchreid's layout: ``ilids/i-LIDS_Pedestrian/Persons/<pid:04d><n:03d>.jpg``
(``0001001.jpg``).  With no camera labels, the protocol draws two distinct
images of a test identity, one for the query and one for the gallery, as
torchreid does; every image has camid 0 in training.  It is the i-LIDS client
of FedPav's federation, which paper 004 calls "iLIDS-VID" (its Table 1: 59 +
60 identities, 476 images; the reference's ``data_preprocess/data/ilids/meta.json``).
"""

from __future__ import annotations

import re
from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, bad_name, images

RELEASE = ReleaseTree(
    "root/i-LIDS_Pedestrian/Persons/<pid:04d><n:03d>.jpg (e.g. 0001001.jpg; the ilids/ level is optional)",
    levels=("ilids/i-LIDS_Pedestrian/Persons", "i-LIDS_Pedestrian/Persons", "Persons"))
_NAME = re.compile(r"(\d{4})(\d{3})\.jpg")


def read_pool(base: Path) -> DGPool:
    by_pid: dict[int, list] = {}
    for path in images(base, (".jpg",)):
        match = _NAME.fullmatch(path.name)
        if match is None:
            raise bad_name(path, "<pid:04d><n:03d>.jpg")
        pid = int(match.group(1))
        by_pid.setdefault(pid, []).append((str(path), pid, 0))
    return DGPool("ilids", str(base), {pid: (s, s) for pid, s in by_pid.items()}, shared_view=True)
