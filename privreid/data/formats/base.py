"""What every dataset format shares: the :class:`DatasetFormat` record and the public parsing helpers.

A format module (one per layout, :mod:`privreid.data.formats`) builds a
:class:`DatasetFormat` from these helpers; a user's own format can use them
too (``docs/datasets.md``, "Use your own dataset"; ``docs/extending.md``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from privreid.data.types import ReIDDataset, Sample, relabel
from privreid.errors import DataError

__all__ = [
    "DETECT_FIRST",
    "DETECT_LAST",
    "DETECT_RELEASE",
    "DETECT_SMALL",
    "DETECT_USER",
    "DatasetFormat",
    "IMAGE_SUFFIXES",
    "MARKET_SPLITS",
    "PIL_ERRORS",
    "check_ids",
    "check_root",
    "has_duke_names",
    "has_market_folders",
    "load_market_layout",
    "make_dataset",
    "read_image",
    "read_market_folder",
    "subfolder",
    "verify_images",
]

#: Detection order (:attr:`DatasetFormat.priority`): formats are tried in increasing priority; the
#: first priority at which some format recognises the root wins, and two formats recognising it at the
#: same priority are refused ("holds several datasets").  The visible-infrared marker files come
#: first (each its own priority, in their historical order), then the release folders of the large
#: RGB benchmarks, then the small DG benchmarks, then user formats, then the bare Market-1501 folders.
DETECT_FIRST = 0
DETECT_RELEASE = 10
DETECT_SMALL = 20
DETECT_USER = 50
DETECT_LAST = 90

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
#: Market-style split folders: ReIDDataset field -> folder name.
MARKET_SPLITS = (("train", "bounding_box_train"), ("query", "query"), ("gallery", "bounding_box_test"))
#: What PIL raises on unreadable, truncated or malicious files.
PIL_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)
# torchreid's pattern, anchored at the start of the file name.
_MARKET_NAME = re.compile(r"([-\d]+)_c(\d)")
_DUKE_NAME = re.compile(r"-?\d+_c\d_f\d+\.jpg")


@dataclass(frozen=True)
class DatasetFormat:
    """One dataset layout: its name (the ``--format`` value), its layout (one line), how to recognise it, how to load it.

    ``detect(root)`` (an existing non-empty directory) must not raise on a foreign layout. ``load(root,
    variant)`` returns a :class:`~privreid.data.types.ReIDDataset` (train pids relabelled: :func:`make_dataset`)
    or raises DataError / ConfigError; ``variant`` is ``None`` unless ``variant_pattern`` (a regex) allows
    ``--format <name>-<variant>``. ``priority`` orders detection (:data:`DETECT_RELEASE`); ``loose_detect`` is
    weaker evidence tried at :data:`DETECT_LAST`; ``family`` groups formats (``rgb``, ``dg``, ``vi``,
    ``video``, ``user``).
    """

    name: str
    layout: str
    detect: Callable[[Path], bool] | None
    load: Callable[[Path, "str | None"], ReIDDataset]
    priority: int = DETECT_USER
    family: str = "user"
    variant_pattern: str | None = None
    variant_doc: str | None = None
    loose_detect: Callable[[Path], bool] | None = None

    @property
    def spellings(self) -> list[str]:
        """The ``--format`` values this format answers to (``regdb``, ``regdb-<trial>``)."""
        return [self.name] + ([f"{self.name}-{self.variant_doc}"] if self.variant_doc else [])


def check_root(root: str | os.PathLike) -> Path:
    """``root`` as an absolute path; :class:`DataError` when it is missing, not a directory or empty."""
    root = Path(root).expanduser().absolute()
    if not root.exists():
        raise DataError(f"dataset root {root} does not exist")
    if not root.is_dir():
        raise DataError(f"dataset root {root} is not a directory")
    if next(root.iterdir(), None) is None:
        raise DataError(f"dataset root {root} is empty")
    return root


def subfolder(root: Path, names: tuple[str, ...]) -> Path:
    """The first of ``root/<name>`` that exists, else ``root`` itself (the release's optional top folder)."""
    for name in names:
        if (root / name).is_dir():
            return root / name
    return root


def read_image(path: str | os.PathLike) -> Image.Image:
    """Open ``path`` with PIL and decode it to RGB; raise :class:`DataError` naming the file if that fails."""
    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except PIL_ERRORS as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc


def verify_images(dataset: ReIDDataset, *, full_decode: bool = False,
                  splits: tuple[str, ...] = ("train", "query", "gallery")) -> None:
    """Check every image of ``splits``; DataError names the first bad file and the count. PIL's
    ``Image.verify()`` plus a JPEG end-of-image marker (empty, corrupt, cut-short files, no decoding), or a full
    decode with ``full_decode``."""
    paths = [path for split in splits for path, _, _ in getattr(dataset, split)]
    bad = [(path, problem) for path in paths if (problem := image_problem(path, full_decode=full_decode))]
    if bad:
        path, problem = bad[0]
        raise DataError(f"corrupt image {path}: {problem} ({len(bad)} of {len(paths)} images of {dataset.name} "
                        "are empty, corrupt or cut short)")


def image_problem(path: str | os.PathLike, *, full_decode: bool = False) -> str | None:
    """Why ``path`` is not a whole image (empty, corrupt, cut short), or None."""
    try:
        with Image.open(path) as img:
            if full_decode:
                img.convert("RGB")
                return None
            img.verify()
            jpeg = img.format == "JPEG"
    except PIL_ERRORS as exc:
        return str(exc) or type(exc).__name__
    if jpeg:  # Image.verify() reads a JPEG's headers only; its scan data never holds an unescaped marker
        data = Path(path).read_bytes()
        if data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda"):
            return "the JPEG is cut short (no end-of-image marker after its last scan)"
    return None


def check_ids(path: Path, pid: int, cam: int) -> None:
    """Reject what torchreid's range asserts would: pids below -1 and camera 0 (1-based); no upper bounds, so
    generated data may use more cameras."""
    if pid < -1:
        raise DataError(f"file {path}: pid {pid} is invalid (identities are >= 0, -1 marks junk)")
    if cam < 1:
        raise DataError(f"file {path}: camera {cam} is invalid (camera numbers start at 1)")


def make_dataset(
    name: str, base: Path, *, train: list[Sample], query: list[Sample], gallery: list[Sample]
) -> ReIDDataset:
    """A :class:`ReIDDataset` with train pids relabelled; :class:`DataError` when a split is empty."""
    for split, samples in (("train", train), ("query", query), ("gallery", gallery)):
        if not samples:
            raise DataError(f"{name} at {base}: the {split} split has no identities (junk pid -1 images are dropped)")
    return ReIDDataset(name=name, train=relabel(train), query=query, gallery=gallery, root=str(base))


def read_market_folder(folder: Path, suffixes: tuple[str, ...]) -> list[Sample]:
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
        check_ids(path, pid, cam)
        if pid != -1:
            samples.append((str(path), pid, cam - 1))
    return samples


def load_market_layout(name: str, base: Path, suffixes: tuple[str, ...]) -> ReIDDataset:
    """The three Market-style split folders of ``base`` (:data:`MARKET_SPLITS`) as a dataset named ``name``."""
    splits = {field: read_market_folder(base / folder, suffixes) for field, folder in MARKET_SPLITS}
    return make_dataset(name, base, **splits)


def has_market_folders(root: Path) -> bool:
    """Whether ``root`` holds at least one Market-style split folder."""
    return any((root / folder).is_dir() for _, folder in MARKET_SPLITS)


def has_duke_names(base: Path) -> bool:
    """Whether the first image found in the split folders is named like a DukeMTMC-reID image."""
    for _, folder in MARKET_SPLITS:
        if (base / folder).is_dir():
            for entry in sorted(os.listdir(base / folder)):
                if entry.endswith(".jpg"):
                    return _DUKE_NAME.fullmatch(entry) is not None
    return False
