"""privreid's own visible-infrared layout ``vi-folders`` (written by ``privreid data synth --vi``).

``{train,test}/{visible,infrared}/c<cam>/<pid>/`` holding images (image
data) or one folder of frames per tracklet (video).  Query = ``test/infrared``,
gallery = ``test/visible``; whole gallery, image CMC; T = 6 frames per
tracklet.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from privreid.data.formats.base import DETECT_FIRST, IMAGE_SUFFIXES, DatasetFormat, check_ids, check_root
from privreid.data.types import INFRARED, VISIBLE, ReIDDataset, Sample, VIProtocol
from privreid.errors import DataError

from privreid.data.formats.vi.common import vi_dataset

LAYOUT = ("root/{train,test}/{visible,infrared}/c<cam>/<pid>/ holding images, or one folder of "
          "frames per tracklet (privreid data synth --vi / --video)")
_FOLDER_MODALITIES = (VISIBLE, INFRARED)


def load_vi_folders(root: str | os.PathLike) -> ReIDDataset:
    """privreid's ``vi-folders`` layout (images or tracklet folders); see the module docstring."""
    base = check_root(root)
    modality: dict[str, str] = {}
    tracklets: dict[str, list[str]] = {}

    def read(split: str, modalities: Iterable[str]) -> list[Sample]:
        if not (base / split).is_dir():
            raise DataError(f"missing split folder {base / split}")
        out = []
        for mod in modalities:
            for cam_dir in _sorted_dirs(base / split / mod):
                if re.fullmatch(r"c\d+", cam_dir.name) is None:
                    raise DataError(f"folder {cam_dir} should be named c<camera number>")
                cam = int(cam_dir.name[1:])
                for pid_dir in _sorted_dirs(cam_dir):
                    if not pid_dir.name.isdigit():
                        raise DataError(f"folder {pid_dir} should be named by the identity number")
                    pid = int(pid_dir.name)
                    check_ids(pid_dir, pid, cam)
                    for path, frames in _shots(pid_dir):
                        if frames is not None:
                            tracklets[path] = frames
                        modality[path] = mod
                        out.append((path, pid, cam - 1))
        return out

    train = read("train", _FOLDER_MODALITIES)
    query, gallery = read("test", (INFRARED,)), read("test", (VISIBLE,))
    if tracklets and len(tracklets) != len(modality):
        raise DataError(f"{base} mixes image files and tracklet folders; use one or the other")
    return vi_dataset("vi-folders", base, train, query, gallery, modality, VIProtocol(), tracklets or None)


def _sorted_dirs(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir())


def _shots(pid_dir: Path) -> list[tuple[str, list[str] | None]]:
    """The images of an identity folder (frames None), or its tracklet folders with their sorted frames."""
    images = sorted(str(p) for p in pid_dir.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    folders = _sorted_dirs(pid_dir)
    if images and folders:
        raise DataError(f"{pid_dir} mixes image files and tracklet folders; use one or the other")
    out: list[tuple[str, list[str] | None]] = [(path, None) for path in images]
    for folder in folders:
        frames = sorted(str(p) for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not frames:
            raise DataError(f"tracklet folder {folder} holds no image")
        out.append((str(folder), frames))
    return out


FORMAT = DatasetFormat("vi-folders", LAYOUT,
                       lambda root: any((root / "train" / m).is_dir() for m in _FOLDER_MODALITIES),
                       lambda root, variant=None: load_vi_folders(root), priority=DETECT_FIRST + 5, family="vi")
