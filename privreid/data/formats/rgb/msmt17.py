"""MSMT17 V1 or V2 (Wei et al., CVPR 2018) with its ``list_*.txt`` files (``<relpath> <pid>`` per line).

The camera is the third ``_``-separated field of the file name, 1-based
(``0000_000_01_0303morning_0015_0.jpg`` -> camid 0).  Two variants of the
training set, both of 1,041 identities:

* ``msmt17`` / ``msmt17-trainval`` (the default): ``list_train.txt`` +
  ``list_val.txt``, 32,621 images, as FedPav (paper 004, Table 1) and
  torchreid's docstring count it;
* ``msmt17-train``: ``list_train.txt`` only, 30,248 images, as FedReID
  (paper 002, Table I) and SKA (paper 000) train, and as torchreid's own
  loader reads it unless ``combineall`` is set.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from privreid.data.types import ReIDDataset, Sample
from privreid.errors import ConfigError, DataError

from privreid.data.formats.base import DETECT_RELEASE, DatasetFormat, check_ids, check_root, make_dataset, subfolder

LAYOUT = ("root/list_{train,val,query,gallery}.txt with '<relpath> <pid>' lines, images under "
          "root/train/ + root/test/ (V1) or root/mask_train_v2/ + root/mask_test_v2/ (V2), named "
          "<pid>_<n>_<cam>_... (e.g. 0000/0000_000_01_0303morning_0015_0.jpg), cameras 01-15; "
          "the files may sit in root/MSMT17_V1/ or root/MSMT17_V2/")
SUBDIRS = ("MSMT17_V1", "MSMT17_V2")  # torchreid's order: V1 wins when both exist
IMAGE_DIRS = (("train", "test"), ("mask_train_v2", "mask_test_v2"))  # V1, V2
#: variant -> the list files of its training set (see the module docstring)
TRAIN_LISTS = {"trainval": ("list_train.txt", "list_val.txt"), "train": ("list_train.txt",)}


def detect(root: Path) -> bool:
    return (subfolder(root, SUBDIRS) / "list_train.txt").is_file()


def load(root: Path, variant: str | None = None) -> ReIDDataset:
    variant = variant or "trainval"
    if variant not in TRAIN_LISTS:
        raise ConfigError(f"unknown msmt17 variant {variant!r}; choose one of: {', '.join(TRAIN_LISTS)}")
    base = subfolder(check_root(root), SUBDIRS)
    for train_name, test_name in IMAGE_DIRS:
        if (base / train_name).is_dir():
            break
    else:
        raise DataError(f"missing split folder: {base} has neither train/ (MSMT17_V1) nor mask_train_v2/ (MSMT17_V2)")
    train_dir, test_dir = base / train_name, base / test_name
    if not test_dir.is_dir():
        raise DataError(f"missing split folder {test_dir}")
    train = [sample for name in TRAIN_LISTS[variant] for sample in read_list(train_dir, base / name)]
    query = read_list(test_dir, base / "list_query.txt")
    gallery = read_list(test_dir, base / "list_gallery.txt")
    name = "msmt17" if variant == "trainval" else f"msmt17-{variant}"
    return make_dataset(name, base, train=train, query=query, gallery=gallery)


def read_list(image_dir: Path, list_path: Path) -> list[Sample]:
    """Parse an MSMT17 ``list_*.txt`` (``<relpath> <pid>`` per line), as torchreid's ``process_dir``."""
    if not list_path.is_file():
        raise DataError(f"missing list file {list_path}")
    samples = []
    with open(list_path, encoding="utf-8") as lines:
        for lineno, line in enumerate(lines, start=1):
            fields = line.split()
            if not fields:
                continue
            fname = PurePosixPath(fields[0]).name.split("_")
            if len(fields) != 2 or not re.fullmatch(r"-?\d+", fields[1]) or len(fname) < 3 or not fname[2].isdigit():
                raise DataError(
                    f"{list_path}:{lineno}: expected '<relpath> <pid>' with a file named <pid>_<n>_<cam>_..., "
                    f"got {line.strip()!r}"
                )
            path = image_dir / fields[0]
            pid, cam = int(fields[1]), int(fname[2])
            check_ids(path, pid, cam)
            if pid != -1:
                samples.append((str(path), pid, cam - 1))
    return samples


FORMAT = DatasetFormat("msmt17", LAYOUT, detect=detect, load=load, priority=DETECT_RELEASE, family="rgb",
                       variant_pattern=r".+", variant_doc="{" + ",".join(TRAIN_LISTS) + "}")
