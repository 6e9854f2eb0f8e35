"""HITSZ-VCM (Lin et al., CVPR 2022), video.

``info/{train_name,test_name}.txt`` (one frame name per line, e.g.
``0001M1D1T0001F001.jpg``: pid, modality 1 = infrared / 2 = visible,
camera ``D..``, tracklet ``T..``, frame ``F..``),
``info/track_{train,test}_info.txt`` (rows ``modality start end pid camera``,
1-based inclusive ranges into the name list), ``info/query_IDX.txt``
(1-based test rows that are queries); frames under
``Train/<pid>/<ir|rgb>/<D..>/<F..>`` and ``Test/...`` (the ``info/``,
``Train/`` and ``Test/`` levels are optional).  Tracklets shorter than
``min_seq_len`` = 12 frames are dropped (the released MITML loader).
Query = the query rows that are infrared, gallery = the other rows that
are visible.  A tracklet's key is ``<frame folder>/tracklet<row>``.
Evaluation averages T = 6 frames per tracklet (the official setting).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from privreid.data.formats.base import DETECT_FIRST, DatasetFormat, check_ids, check_root, subfolder
from privreid.data.types import INFRARED, VISIBLE, ReIDDataset, Sample, VIProtocol
from privreid.errors import DataError

from privreid.data.formats.vi.common import marker, read_int_rows, read_int_tokens, read_lines, vi_dataset

LAYOUT = ("video: root/info/{train_name,test_name,track_train_info,track_test_info,query_IDX}.txt + "
          "frames root/{Train,Test}/<pid>/<ir|rgb>/<D..>/*.jpg")
#: video: whole gallery, image CMC, tracklet features averaged over T = 6 frames (L2RW+ Sec. IV-B)
_VCM_PROTOCOL = VIProtocol(seq_len=6)
_VCM_MODALITIES = {1: (INFRARED, "ir"), 2: (VISIBLE, "rgb")}
_VCM_NAME = re.compile(r"(\d{4})M(\d)(D\d+)T(\d+)F(.+)")


def load_hitsz_vcm(root: str | os.PathLike, min_seq_len: int = 12) -> ReIDDataset:
    """HITSZ-VCM tracklets (video); see the module docstring."""
    base = check_root(root)
    info = subfolder(base, ("info",))
    modality: dict[str, str] = {}
    tracklets: dict[str, list[str]] = {}

    def rows(split: str, folder: str) -> list[tuple[int, Sample]]:
        names = read_lines(info / f"{split}_name.txt")
        image_root = subfolder(base, (folder,))
        out = []
        for row, fields in enumerate(read_int_rows(info / f"track_{split}_info.txt", 5), start=1):
            m, start, end, pid, cam = fields
            if m not in _VCM_MODALITIES or not 1 <= start <= end <= len(names):
                raise DataError(f"{info / f'track_{split}_info.txt'}:{row}: expected 'modality(1|2) start end pid "
                                f"camera' with 1 <= start <= end <= {len(names)}, got {fields}")
            check_ids(info / f"track_{split}_info.txt", pid, cam)
            if end - start + 1 < min_seq_len:
                continue
            mod, folder_name = _VCM_MODALITIES[m]
            frames = [str(image_root / _vcm_frame_path(name, folder_name)) for name in names[start - 1:end]]
            key = str(Path(frames[0]).parent / f"tracklet{row:05d}")
            tracklets[key], modality[key] = frames, mod
            out.append((row, (key, pid, cam - 1)))
        return out

    train = [sample for _, sample in rows("train", "Train")]
    test = rows("test", "Test")
    queries = set(read_int_tokens(info / "query_IDX.txt"))
    query = [s for row, s in test if row in queries and modality[s[0]] == INFRARED]
    gallery = [s for row, s in test if row not in queries and modality[s[0]] == VISIBLE]
    return vi_dataset("hitsz-vcm", base, train, query, gallery, modality, _VCM_PROTOCOL, tracklets)


def _vcm_frame_path(name: str, modality_folder: str) -> str:
    """``0001M1D1T0001F001.jpg`` -> ``0001/ir/D1/001.jpg`` (the released loader's ``decoder_pic_path``)."""
    found = _VCM_NAME.fullmatch(name)
    if found is None:
        raise DataError(f"HITSZ-VCM frame name {name!r} does not follow <pid>M<modality>D<camera>T<tracklet>F<frame>")
    pid, _, camera, _, frame = found.groups()
    return f"{pid}/{modality_folder}/{camera}/{frame}"


FORMAT = DatasetFormat("hitsz-vcm", LAYOUT, marker("info", "track_train_info.txt"),
                       lambda root, variant=None: load_hitsz_vcm(root), priority=DETECT_FIRST + 3, family="video")
