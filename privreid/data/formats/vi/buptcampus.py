"""BUPTCampus (Du et al., 2023), video.

``DATA/<pid>/{RGB,IR,FakeIR}/<camera>/...jpg``, ``data_paths.json``
(``{pid: {RGB|IR: {camera: {tracklet: [relpath under DATA, ...]}}}}``),
``{train,query,gallery}.txt`` with ``pid modality camera tracklet`` rows
(modality ``RGB``, ``IR`` or ``RGB/IR`` for a paired tracklet).  The
auxiliary identities (``train_auxiliary.txt``) and the generated
``FakeIR`` images are not used, as in L2RW+.  Cameras LS3, G25, CQ1, W4,
TSG1, TSG2 are camids 0-5.  Query = the infrared tracklets of
``query.txt``, gallery = the visible tracklets of ``gallery.txt``.  A
tracklet's key is ``DATA/<pid>/<modality>/<camera>/<tracklet>``.
Evaluation averages T = 10 frames per tracklet (the official setting).
"""

from __future__ import annotations

import json
import os

from privreid.data.formats.base import DETECT_FIRST, DatasetFormat, check_root, subfolder
from privreid.data.types import INFRARED, VISIBLE, ReIDDataset, Sample, VIProtocol
from privreid.errors import DataError

from privreid.data.formats.vi.common import marker, read_rows, vi_dataset

LAYOUT = ("video: root/DATA/<pid>/{RGB,IR}/<camera>/*.jpg + root/data_paths.json + "
          "root/{train,query,gallery}.txt")
#: video: whole gallery, image CMC, tracklet features averaged over T = 10 frames (L2RW+ Sec. IV-B)
_BUPT_PROTOCOL = VIProtocol(seq_len=10)
_BUPT_CAMERAS = {"LS3": 0, "G25": 1, "CQ1": 2, "W4": 3, "TSG1": 4, "TSG2": 5}
_BUPT_MODALITIES = {"RGB": VISIBLE, "IR": INFRARED}


def load_buptcampus(root: str | os.PathLike) -> ReIDDataset:
    """BUPTCampus tracklets (video), without the auxiliary identities; see the module docstring."""
    base = subfolder(check_root(root), ("BUPTCampus",))
    info_path = base / "data_paths.json"
    try:
        info = json.loads(info_path.read_text())
    except FileNotFoundError:
        raise DataError(f"missing {info_path}") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {info_path}: {exc}") from exc
    data = base / "DATA"
    modality: dict[str, str] = {}
    tracklets: dict[str, list[str]] = {}

    def listed(split: str, keep: str | None = None) -> list[Sample]:
        path = base / f"{split}.txt"
        out = []
        for lineno, fields in enumerate(read_rows(path), start=1):
            if len(fields) != 4 or not fields[0].isdigit() or fields[2] not in _BUPT_CAMERAS:
                raise DataError(f"{path}:{lineno}: expected 'pid RGB|IR|RGB/IR camera tracklet' with a camera "
                                f"in {', '.join(_BUPT_CAMERAS)}, got {' '.join(fields)!r}")
            pid, mods, cam, tid = fields
            for mod in mods.split("/"):
                if mod not in _BUPT_MODALITIES:
                    raise DataError(f"{path}:{lineno}: unknown modality {mod!r} (expected RGB, IR or RGB/IR)")
                if keep is not None and _BUPT_MODALITIES[mod] != keep:
                    continue
                try:
                    rels = info[pid][mod][cam][tid]
                except (KeyError, TypeError):
                    raise DataError(f"{path}:{lineno}: tracklet {pid}/{mod}/{cam}/{tid} is not in {info_path}") from None
                key = str(data / pid / mod / cam / tid)
                tracklets[key] = [str(data / rel) for rel in rels]
                modality[key] = _BUPT_MODALITIES[mod]
                out.append((key, int(pid), _BUPT_CAMERAS[cam]))
        return out

    return vi_dataset("buptcampus", base, listed("train"), listed("query", INFRARED), listed("gallery", VISIBLE),
                      modality, _BUPT_PROTOCOL, tracklets)


FORMAT = DatasetFormat("buptcampus", LAYOUT, marker("BUPTCampus", "data_paths.json"),
                       lambda root, variant=None: load_buptcampus(root), priority=DETECT_FIRST + 4, family="video")
