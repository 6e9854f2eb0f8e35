"""LLCM (Zhang & Wang, CVPR 2023).

``LLCM/idx/train_{vis,nir}.txt`` (``<relpath> <label>``, the path holds
``cam<k>``), ``idx/test_id.txt``, ``test_{vis,nir}/cam<k>/<pid:04d>/*.jpg``.
Cameras record both modalities (camera ``k`` is camid ``k-1`` in both).
Query = ``test_nir`` cameras 1, 2 and 4-9, gallery = ``test_vis`` (every
camera); 10 single-shot gallery trials, CMC by identity; same-identity
same-camera gallery images are dropped (the dataset's ``eval_llcm``).  The
query cameras are those of the NIR list of L2RW+'s code
(``CI/data_manager.py``, ``process_query_llcm`` with ``mode=2``, which its
``test.py`` uses for the query): ``cam3`` is not among them.
"""

from __future__ import annotations

import os
import re

from privreid.data.formats.base import DETECT_FIRST, DatasetFormat, check_root, subfolder
from privreid.data.types import INFRARED, VISIBLE, ReIDDataset, Sample, VIProtocol
from privreid.errors import DataError

from privreid.data.formats.vi.common import marker, read_ids, read_label_list, vi_dataset, walk_identity_folders

LAYOUT = ("root/idx/train_{vis,nir}.txt + root/idx/test_id.txt + root/test_{vis,nir}/cam<k>/<pid:04d>/*.jpg "
          "(the folders may sit in root/LLCM/)")
#: the released evaluation code of LLCM: 10 single-shot trials, CMC over identities
_LLCM_PROTOCOL = VIProtocol(gallery_trials=10, cmc_by_identity=True)
#: the NIR cameras whose test images are queries (see the module docstring)
QUERY_CAMERAS = (1, 2, 4, 5, 6, 7, 8, 9)


def load_llcm(root: str | os.PathLike) -> ReIDDataset:
    """LLCM: infrared (NIR) query, visible gallery, 10 single-shot trials; see the module docstring."""
    base = subfolder(check_root(root), ("LLCM",))
    modality: dict[str, str] = {}

    def camid(rel: str) -> int:
        found = re.search(r"(?:^|/)cam(\d+)/", rel)
        if found is None:
            raise DataError(f"LLCM list entry {rel!r} has no cam<k>/ folder to take the camera from")
        return int(found.group(1)) - 1

    train = (read_label_list(base, base / "idx" / "train_vis.txt", camid, VISIBLE, modality)
             + read_label_list(base, base / "idx" / "train_nir.txt", camid, INFRARED, modality))
    test_ids = read_ids(base / "idx" / "test_id.txt")

    def test(folder: str, mod: str, cameras: tuple[int, ...] | None = None) -> list[Sample]:
        cams = sorted((p for p in (base / folder).glob("cam*") if re.fullmatch(r"cam\d+", p.name)
                       and (cameras is None or int(p.name[3:]) in cameras)), key=lambda p: int(p.name[3:]))
        if not cams:
            raise DataError(f"missing split folder {base / folder} (expected cam<k>/<pid>/ folders)")
        return walk_identity_folders([(p, int(p.name[3:]) - 1, mod) for p in cams], test_ids, modality)

    query, gallery = test("test_nir", INFRARED, QUERY_CAMERAS), test("test_vis", VISIBLE)
    return vi_dataset("llcm", base, train, query, gallery, modality, _LLCM_PROTOCOL)


FORMAT = DatasetFormat("llcm", LAYOUT, marker("LLCM", "idx", "train_vis.txt"),
                       lambda root, variant=None: load_llcm(root), priority=DETECT_FIRST + 2, family="vi")
