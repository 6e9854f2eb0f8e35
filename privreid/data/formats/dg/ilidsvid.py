"""iLIDS-VID (Wang et al., ECCV 2014): 300 people, one sequence and one key image in each of 2 cameras.

torchreid reads the sequences (``i-LIDS-VID/sequences/cam<k>/person<id>/``);
privreid reads the key images of the release's
``i-LIDS-VID/images/cam<k>/person<id:03d>/cam<k>_person<id:03d>.png`` folder
(view A = cam1, view B = cam2).  FedPav's "iLIDS-VID" client is not this
dataset but QMUL i-LIDS (:mod:`~privreid.data.formats.dg.ilids`).  The release's ten splits
(``train-test people splits/*.mat``) are not read: splits are drawn like the
other datasets' (seeded random halves).
"""

from __future__ import annotations

import re
from pathlib import Path

from privreid.data.formats.dg.common import DGPool, ReleaseTree, bad_name, images, views_by_identity

RELEASE = ReleaseTree(
    "root/i-LIDS-VID/images/{cam1,cam2}/person<id:03d>/cam<k>_person<id:03d>.png (the ilids-vid/ level is optional)",
    levels=("ilids-vid/i-LIDS-VID/images", "i-LIDS-VID/images", "images"), holding=("cam1", "cam2"))
_PERSON = re.compile(r"person(\d+)")


def read_pool(base: Path) -> DGPool:
    viewed = []
    for c, cam in enumerate(("cam1", "cam2")):
        for person in sorted(p for p in (base / cam).iterdir() if p.is_dir()):
            match = _PERSON.fullmatch(person.name)
            if match is None:
                raise bad_name(person, "person<id:03d>")
            pid = int(match.group(1))
            viewed += [(c, (str(p), pid, c)) for p in images(person, (".png",))]
    return DGPool("ilidsvid", str(base), views_by_identity(viewed))
