"""Loaders for the real person re-identification benchmarks.

Every loader returns a :class:`~privreid.data.types.ReIDDataset` parsed the way
torchreid (``torchreid.data.datasets.image``) parses the same release:

* junk images (pid ``-1``) are dropped at load time;
* distractors (pid ``0``) stay where they are (Market-1501's gallery);
* the camera index comes from the file name and is made 0-based (``c1`` -> 0);
* ``train`` pids are relabelled ``0..N-1`` in sorted order of the original pid,
  ``query`` / ``gallery`` keep the original pids (so that the two can be matched).

Supported releases (see :data:`DATASET_FORMATS` for the directory layouts):

``market1501`` / ``dukemtmcreid``
    Image folders named ``<pid>_c<cam>...``, parsed with torchreid's regex
    ``([-\\d]+)_c(\\d)``.  The two share one layout; :func:`detect_format` tells
    them apart by the ``DukeMTMC-reID/`` sub-folder or by the file names
    (DukeMTMC-reID names are ``0001_c2_f0046182.jpg``, Market-1501 names carry a
    sequence number: ``0002_c1s1_000451_03.jpg``).
``cuhk03np``
    The CUHK03-NP *directory* release of the new (767/700) protocol of Zhong
    et al., CVPR 2017: ``detected/`` and ``labeled/`` folders in the Market-1501
    layout with ``.png`` images.  This is not torchreid's ``cuhk03`` route, which
    rebuilds the images from ``cuhk-03.mat`` plus split json files.
``msmt17``
    MSMT17 V1 or V2 with its ``list_*.txt`` files (``<relpath> <pid>`` per line).
    The camera is the third ``_``-separated field of the file name, 1-based
    (``0000_000_01_0303morning_0015_0.jpg`` -> camid 0).  ``train`` is
    ``list_train.txt`` + ``list_val.txt``: the 32,621 images / 1,041 identities
    that papers (and torchreid's docstring) report.  Note that torchreid's own
    loader only adds the ``val`` images when ``combineall`` is set.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from PIL import Image

from privreid.errors import ConfigError, DataError
from privreid.data.types import ReIDDataset, Sample, relabel

DATASET_FORMATS: dict[str, str] = {
    "market1501": (
        "root/{bounding_box_train,query,bounding_box_test}/*.jpg named <pid>_c<cam>s<seq>_<frame>_<box>.jpg "
        "(e.g. 0002_c1s1_000451_03.jpg; pid -1 = junk, 0000 = distractor), cameras c1-c6; "
        "the folders may sit in root/Market-1501-v15.09.15/"
    ),
    "dukemtmcreid": (
        "root/{bounding_box_train,query,bounding_box_test}/*.jpg named <pid>_c<cam>_f<frame>.jpg "
        "(e.g. 0001_c2_f0046182.jpg), cameras c1-c8; the folders may sit in root/DukeMTMC-reID/"
    ),
    "cuhk03np": (
        "root/{detected,labeled}/{bounding_box_train,query,bounding_box_test}/*.png named "
        "<pid>_c<cam>_<n>.png (e.g. 0001_c1_1.png), cameras c1-c2 (CUHK03-NP new-protocol release); "
        "variant 'detected' (default) or 'labeled'; the folders may sit in root/cuhk03-np/"
    ),
    "msmt17": (
        "root/list_{train,val,query,gallery}.txt with '<relpath> <pid>' lines, images under "
        "root/train/ + root/test/ (V1) or root/mask_train_v2/ + root/mask_test_v2/ (V2), named "
        "<pid>_<n>_<cam>_... (e.g. 0000/0000_000_01_0303morning_0015_0.jpg), cameras 01-15; "
        "the files may sit in root/MSMT17_V1/ or root/MSMT17_V2/"
    ),
}

CUHK03NP_VARIANTS = ("detected", "labeled")

# Market-style split folders: ReIDDataset field -> folder name.
_MARKET_SPLITS = (("train", "bounding_box_train"), ("query", "query"), ("gallery", "bounding_box_test"))
# torchreid's pattern, anchored at the start of the file name.
_MARKET_NAME = re.compile(r"([-\d]+)_c(\d)")
_DUKE_NAME = re.compile(r"-?\d+_c\d_f\d+\.jpg")
# format -> (optional release sub-folder, image suffixes)
_FOLDER_FORMATS = {
    "market1501": ("Market-1501-v15.09.15", (".jpg",)),
    "dukemtmcreid": ("DukeMTMC-reID", (".jpg",)),
    "cuhk03np": ("cuhk03-np", (".png", ".jpg")),
}
_MSMT_SUBDIRS = ("MSMT17_V1", "MSMT17_V2")  # torchreid's order: V1 wins when both exist
_MSMT_IMAGE_DIRS = (("train", "test"), ("mask_train_v2", "mask_test_v2"))  # V1, V2
# What PIL raises on unreadable, truncated or malicious files.
_PIL_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def load_dataset(root: str | os.PathLike, name: str = "auto", *, variant: str | None = None) -> ReIDDataset:
    """Load the dataset at ``root`` in format ``name`` (a key of :data:`DATASET_FORMATS` or ``"auto"``).

    ``variant`` selects the CUHK03-NP images (``"detected"``, the default, or
    ``"labeled"``) and is refused for the other formats.  ``ReIDDataset.name``
    is the format name (``"cuhk03np-detected"`` / ``"cuhk03np-labeled"`` for
    CUHK03-NP) and ``ReIDDataset.root`` the folder the splits were read from.

    Raises :class:`ConfigError` for an unknown ``name`` or ``variant`` and
    :class:`DataError` for a missing, empty or malformed dataset.
    """
    from privreid.data.formats_dg import DG_FORMATS, load_dg_dataset

    if name in DG_FORMATS:
        return load_dg_dataset(root, name)
    if name != "auto":
        if name not in DATASET_FORMATS:
            from privreid.data.vi_formats import VI_FORMATS

            raise ConfigError(f"unknown dataset format {name!r}; choose one of: auto, "
                              f"{', '.join([*DATASET_FORMATS, *DG_FORMATS, *VI_FORMATS])}, regdb-<trial>")
        _check_variant(name, variant)
    root = _check_root(root)
    if name == "auto":
        name = detect_format(root)
        if name in DG_FORMATS:
            return load_dg_dataset(root, name)
        _check_variant(name, variant)
    if name == "msmt17":
        return _load_msmt17(root)
    subdir, suffixes = _FOLDER_FORMATS[name]
    base = _subfolder(root, (subdir,))
    if name == "cuhk03np":
        variant = variant or "detected"
        name, base = f"cuhk03np-{variant}", base / variant
    splits = {field: _read_folder(base / folder, suffixes) for field, folder in _MARKET_SPLITS}
    return _make_dataset(name, base, **splits)


def detect_format(root: str | os.PathLike) -> str:
    """Return the :data:`DATASET_FORMATS` key whose layout ``root`` follows.

    Recognised: MSMT17 list files, CUHK03-NP ``detected``/``labeled`` folders,
    the ``DukeMTMC-reID/`` or ``Market-1501-v15.09.15/`` release folders, then
    the bare Market-1501 folders (DukeMTMC-reID when the file names follow its
    ``<pid>_c<cam>_f<frame>.jpg`` convention).  A folder holding the releases
    of several datasets is refused (load each one by its own root).
    """
    root = _check_root(root)
    cuhk = _subfolder(root, ("cuhk03-np",))
    found = [
        name
        for name, present in (
            ("msmt17", (_subfolder(root, _MSMT_SUBDIRS) / "list_train.txt").is_file()),
            ("cuhk03np", any((cuhk / variant / "bounding_box_train").is_dir() for variant in CUHK03NP_VARIANTS)),
            ("dukemtmcreid", (root / _FOLDER_FORMATS["dukemtmcreid"][0]).is_dir()),
            ("market1501", (root / _FOLDER_FORMATS["market1501"][0]).is_dir()),
        )
        if present
    ]
    if len(found) > 1:
        raise DataError(f"{root} holds several datasets ({', '.join(found)}); give the root of one of them")
    if found:
        return found[0]
    from privreid.data.formats_dg import DG_FORMATS, detect_dg_format

    small = detect_dg_format(root)  # the small DG benchmarks (privreid.data.formats_dg)
    if small is not None:
        return small
    if any((root / folder).is_dir() for _, folder in _MARKET_SPLITS):
        return "dukemtmcreid" if _has_duke_names(root) else "market1501"
    layouts = "; ".join(f"{name}: {layout}" for name, layout in
                        [*DATASET_FORMATS.items(), *((n, m.LAYOUT) for n, m in DG_FORMATS.items())])
    raise DataError(f"cannot recognise the dataset layout of {root}; expected one of: {layouts}")


def read_image(path: str | os.PathLike) -> Image.Image:
    """Open ``path`` with PIL and decode it to RGB; raise :class:`DataError` naming the file if that fails."""
    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except _PIL_ERRORS as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc


def verify_images(dataset: ReIDDataset, *, full_decode: bool = False) -> None:
    """Check every image of ``dataset``; raise :class:`DataError` naming the first bad file.

    By default each file is opened and checked with PIL's ``Image.verify()``,
    which is fast but only inspects headers (and PNG checksums): a JPEG cut
    short passes.  ``full_decode=True`` decodes every image instead, which also
    catches truncated files, at the cost of reading all pixels.
    """
    for path, _, _ in dataset.train + dataset.query + dataset.gallery:
        if full_decode:
            read_image(path)
            continue
        try:
            with Image.open(path) as img:
                img.verify()
        except _PIL_ERRORS as exc:
            raise DataError(f"corrupt image {path}: {exc}") from exc


def _check_variant(name: str, variant: str | None) -> None:
    if variant is None:
        return
    if name != "cuhk03np":
        raise ConfigError(f"variant={variant!r} only applies to cuhk03np, not to {name}")
    if variant not in CUHK03NP_VARIANTS:
        raise ConfigError(f"unknown cuhk03np variant {variant!r}; choose one of: {', '.join(CUHK03NP_VARIANTS)}")


def _check_root(root: str | os.PathLike) -> Path:
    root = Path(root).expanduser().absolute()
    if not root.exists():
        raise DataError(f"dataset root {root} does not exist")
    if not root.is_dir():
        raise DataError(f"dataset root {root} is not a directory")
    if next(root.iterdir(), None) is None:
        raise DataError(f"dataset root {root} is empty")
    return root


def _subfolder(root: Path, names: tuple[str, ...]) -> Path:
    """The first of ``root/<name>`` that exists, else ``root`` itself (the release's optional top folder)."""
    for name in names:
        if (root / name).is_dir():
            return root / name
    return root


def _has_duke_names(base: Path) -> bool:
    """Whether the first image found in the split folders is named like a DukeMTMC-reID image."""
    for _, folder in _MARKET_SPLITS:
        if (base / folder).is_dir():
            for entry in sorted(os.listdir(base / folder)):
                if entry.endswith(".jpg"):
                    return _DUKE_NAME.fullmatch(entry) is not None
    return False


def _read_folder(folder: Path, suffixes: tuple[str, ...]) -> list[Sample]:
    """Parse a Market-style image folder (torchreid's ``process_dir``), dropping junk (pid -1)."""
    if not folder.is_dir():
        raise DataError(f"missing split folder {folder}")
    samples = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() not in suffixes:
            continue  # e.g. the Thumbs.db shipped inside Market-1501
        match = _MARKET_NAME.match(path.name)
        if match is None or not re.fullmatch(r"-?\d+", match.group(1)):
            raise DataError(f"file name {path} does not follow the <pid>_c<camera>... naming convention")
        pid, cam = int(match.group(1)), int(match.group(2))
        _check_ids(path, pid, cam)
        if pid != -1:
            samples.append((str(path), pid, cam - 1))
    return samples


def _load_msmt17(root: Path) -> ReIDDataset:
    base = _subfolder(root, _MSMT_SUBDIRS)
    for train_name, test_name in _MSMT_IMAGE_DIRS:
        if (base / train_name).is_dir():
            break
    else:
        raise DataError(f"missing split folder: {base} has neither train/ (MSMT17_V1) nor mask_train_v2/ (MSMT17_V2)")
    train_dir, test_dir = base / train_name, base / test_name
    if not test_dir.is_dir():
        raise DataError(f"missing split folder {test_dir}")
    train = _read_list(train_dir, base / "list_train.txt") + _read_list(train_dir, base / "list_val.txt")
    query = _read_list(test_dir, base / "list_query.txt")
    gallery = _read_list(test_dir, base / "list_gallery.txt")
    return _make_dataset("msmt17", base, train=train, query=query, gallery=gallery)


def _read_list(image_dir: Path, list_path: Path) -> list[Sample]:
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
            _check_ids(path, pid, cam)
            if pid != -1:
                samples.append((str(path), pid, cam - 1))
    return samples


def _check_ids(path: Path, pid: int, cam: int) -> None:
    """Reject what torchreid's range asserts would: pids below -1 and camera 0 (cameras are 1-based).

    Upper bounds (Market-1501's 6 cameras, DukeMTMC-reID's 8...) are not
    enforced, so that generated data in these layouts may use more cameras.
    """
    if pid < -1:
        raise DataError(f"file {path}: pid {pid} is invalid (identities are >= 0, -1 marks junk)")
    if cam < 1:
        raise DataError(f"file {path}: camera {cam} is invalid (camera numbers start at 1)")


def _make_dataset(
    name: str, base: Path, *, train: list[Sample], query: list[Sample], gallery: list[Sample]
) -> ReIDDataset:
    for split, samples in (("train", train), ("query", query), ("gallery", gallery)):
        if not samples:
            raise DataError(f"{name} at {base}: the {split} split has no identities (junk pid -1 images are dropped)")
    return ReIDDataset(name=name, train=relabel(train), query=query, gallery=gallery, root=str(base))
