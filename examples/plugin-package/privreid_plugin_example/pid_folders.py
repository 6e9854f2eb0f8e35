"""The dataset format ``pid-folders``: one folder per identity in each split, the camera in the file name."""

import re
from pathlib import Path

from privreid.data.formats import (IMAGE_SUFFIXES, DatasetFormat, check_ids, check_root, make_dataset,
                                   register_format)
from privreid.errors import DataError

SPLITS = ("train", "query", "gallery")
LAYOUT = "root/{train,query,gallery}/<pid>/c<camera>_<anything>.jpg (one folder per identity; cameras from 1)"
CAMERA = re.compile(r"c(\d+)_")


def detect(root: Path) -> bool:
    """Three split folders, and the train split holds identity folders (never raises)."""
    return (all((root / split).is_dir() for split in SPLITS)
            and any(p.is_dir() and p.name.isdigit() for p in (root / "train").iterdir()))


def load(root: Path, variant=None):
    root = check_root(root)
    splits = {}
    for split in SPLITS:
        if not (root / split).is_dir():
            raise DataError(f"{root}: missing split folder {split}/ ({LAYOUT})")
        samples = []
        for folder in sorted(p for p in (root / split).iterdir() if p.is_dir()):
            if not folder.name.isdigit():
                raise DataError(f"{folder}: identity folders are named by their number")
            for image in sorted(folder.iterdir()):
                if image.suffix.lower() not in IMAGE_SUFFIXES:
                    continue
                match = CAMERA.match(image.name)
                if match is None:
                    raise DataError(f"{image}: image names start with c<camera>_")
                pid, camera = int(folder.name), int(match.group(1))
                check_ids(image, pid, camera)  # cameras from 1
                samples.append((str(image), pid, camera - 1))
        splits[split] = samples
    return make_dataset("pid-folders", root, **splits)


register_format(DatasetFormat("pid-folders", LAYOUT, detect, load))
