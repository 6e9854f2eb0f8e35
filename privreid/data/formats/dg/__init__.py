"""Loaders for the small unseen-domain benchmarks of domain-generalisable ReID (papers 002, 000, 004, 001).

Each dataset is one self-contained module of this package that defines
``RELEASE`` (a :class:`ReleaseTree`: the expected tree, one line, and where
the release may lie inside a root) and ``read_pool(base)`` (a :class:`DGPool`
read from ``base = RELEASE.find(root)``); :data:`DG_FORMATS` registers them.
The layouts follow torchreid (``torchreid.data.datasets.image``) where
torchreid has the dataset (VIPeR, GRID, PRID, i-LIDS, CUHK01, CUHK02,
CUHK-SYSU crops, iLIDS-VID) and the original release otherwise (3DPeS,
CAVIAR4REID); docs/datasets.md draws each tree.

A :class:`DGPool` is the whole dataset before any split: the images of every
identity in two *views* (the query camera and the gallery camera of the
benchmarks' protocols) plus gallery-only distractors.  Train / test splits are
drawn from it by :mod:`privreid.data.formats.dg.splits` (the DG-ReID protocol
of Song et al., CVPR 2019, FedPav's cross-camera protocol and FedPav's
nine-client split); :func:`load_dg_dataset` returns split 0 of seed 0 as a
plain :class:`~privreid.data.types.ReIDDataset`, which is what training on
one of these datasets uses (torchreid's ``split_id=0``).  Any of them trains
a client: ``--data DIR`` (or ``DIR:<format>``) gives the ``dg`` split's train
identities (CUHK02: P1-P4, every image, as FedARKS trains on it), and
``DIR:<format>-fedpav`` FedPav's client split of the five small datasets of
its federation (PRID, CUHK01, VIPeR, 3DPeS, i-LIDS; paper 004, Table 1).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from privreid.data.formats.base import DETECT_SMALL, IMAGE_SUFFIXES, DatasetFormat
from privreid.data.types import ReIDDataset, Sample
from privreid.errors import ConfigError, DataError

__all__ = ["DGPool", "DG_FORMATS", "ReleaseTree", "dataset_format", "detect_dg_format", "dg_layout", "is_dg_format",
           "load_dg_dataset", "load_pool"]


@dataclass(frozen=True)
class ReleaseTree:
    """Where a dataset's release lies inside a root.

    ``layout`` is the expected tree, one line (for error messages and
    ``--help``); ``levels`` are the sub-folders of the root that may hold the
    release, most nested first (``""`` is the root itself); ``holding`` are
    folders the release folder must contain.
    """

    layout: str
    levels: tuple[str, ...]
    holding: tuple[str, ...] = ()

    def find(self, root: Path) -> Path | None:
        """The first ``root/<level>`` that is a directory holding every folder of ``holding``, or ``None``."""
        for rel in self.levels:
            path = root / rel if rel else root
            if path.is_dir() and all((path / sub).is_dir() for sub in self.holding):
                return path
        return None


@dataclass
class DGPool:
    """A small benchmark before splitting.

    ``views[pid] = (view_a, view_b)``: the identity's images in the query view
    and in the gallery view (``view_b`` is ``view_a`` itself for i-LIDS, which
    has no camera labels: query and gallery are then two distinct images).  An
    identity with one empty view is never a query (it trains, or, in FedPav's
    split, may be a gallery-only test person).  ``distractors`` are
    gallery-only images of identities outside ``views`` (GRID's 775, PRID's
    cam_b-only 549).  ``shared_view`` marks the i-LIDS / CUHK-SYSU case.
    ``fixed_test`` lists the test identities of a dataset with one released
    split (CUHK02: the P5 camera pair) instead of random splits.  ``frames``
    are an identity's sequence frames in each view where the release has them
    besides ``views`` (PRID's ``multi_shot/``): FedPav's split trains on them.
    """

    name: str
    root: str
    views: dict[int, tuple[list[Sample], list[Sample]]]
    distractors: list[Sample] = field(default_factory=list)
    shared_view: bool = False
    fixed_test: list[int] | None = None
    frames: dict[int, tuple[list[Sample], list[Sample]]] = field(default_factory=dict)

    @property
    def paired_ids(self) -> list[int]:
        """Identities that can be tested: seen in both views (twice, for a shared view)."""
        need = 2 if self.shared_view else 1
        return sorted(pid for pid, (a, b) in self.views.items()
                      if len(a) >= need and len(b) >= 1)


def is_dg_format(fmt: str) -> bool:
    return fmt in DG_FORMATS


def dg_layout(fmt: str) -> str:
    """The expected tree of ``fmt``, one line (for error messages and ``--help``)."""
    return DG_FORMATS[fmt].RELEASE.layout


def detect_dg_format(root: str | os.PathLike) -> str | None:
    """The :data:`DG_FORMATS` name whose layout ``root`` follows, or ``None``."""
    root = Path(root)
    found = [name for name, module in DG_FORMATS.items() if module.RELEASE.find(root) is not None]
    if len(found) > 1:
        raise DataError(f"{root} holds several datasets ({', '.join(found)}); give the root of one of them")
    return found[0] if found else None


def load_pool(root: str | os.PathLike, fmt: str) -> DGPool:
    """Read ``root`` in format ``fmt``; :class:`DataError` naming the expected layout when it does not fit."""
    if fmt not in DG_FORMATS:
        raise ConfigError(f"unknown dataset format {fmt!r}; choose one of: {', '.join(DG_FORMATS)}")
    root = Path(root).expanduser().absolute()
    if not root.is_dir():
        raise DataError(f"dataset root {root} does not exist; {fmt} expects {dg_layout(fmt)}")
    base = DG_FORMATS[fmt].RELEASE.find(root)
    if base is None:
        raise DataError(f"{root} is not in the {fmt} layout; expected {dg_layout(fmt)}")
    pool = DG_FORMATS[fmt].read_pool(base)
    if len(pool.paired_ids) < 2:
        raise DataError(f"{fmt} at {base}: fewer than two identities seen in both views; expected {dg_layout(fmt)}")
    return pool


def load_dg_dataset(root: str | os.PathLike, fmt: str, protocol: str | None = None) -> ReIDDataset:
    """Split 0 (seed 0) of ``protocol`` (default: ``fmt``'s default protocol) as a :class:`ReIDDataset`
    (train pids relabelled); named ``<fmt>-<protocol>`` when a protocol is given (``prid-fedpav``)."""
    from privreid.data.formats.dg.splits import default_protocol, make_splits, split_dataset

    pool = load_pool(root, fmt)
    ds = split_dataset(pool, make_splits(pool, protocol or default_protocol(fmt), num_splits=1, seed=0)[0])
    if protocol is not None:
        ds.name = f"{fmt}-{protocol}"
    return ds



def dataset_format(fmt: str) -> DatasetFormat:
    """``fmt`` as a :class:`privreid.data.formats.DatasetFormat` registry entry (detected after the large benchmarks);
    the FedPav clients take the variant ``fedpav`` (their split of paper 004, Table 1)."""
    from privreid.data.formats.dg.splits import FEDPAV_TEST_IDS

    module = DG_FORMATS[fmt]
    variants = ("fedpav",) if fmt in FEDPAV_TEST_IDS else ()

    def load(root: Path, variant: str | None = None) -> ReIDDataset:
        if variant is not None and variant not in variants:
            raise ConfigError(f"unknown {fmt} variant {variant!r}; choose one of: {', '.join(variants)}")
        return load_dg_dataset(root, fmt, variant)

    return DatasetFormat(fmt, module.RELEASE.layout, lambda root: module.RELEASE.find(root) is not None, load,
                         priority=DETECT_SMALL, family="dg", variant_pattern="|".join(variants) or None,
                         variant_doc="|".join(variants) or None)


# --------------------------------------------------------------------------- helpers for the format modules


def images(folder: Path, suffixes: tuple[str, ...] = IMAGE_SUFFIXES) -> list[Path]:
    """The image files of ``folder``, sorted by name; :class:`DataError` when it is missing."""
    if not folder.is_dir():
        raise DataError(f"missing folder {folder}")
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in suffixes and p.is_file())


def bad_name(path: Path, convention: str) -> DataError:
    return DataError(f"file name {path} does not follow the {convention} naming convention")


def numbered_samples(base: Path, suffix: str, per_camera: int) -> list[Sample]:
    """The ``<pid:04d><n:03d><suffix>`` images of ``base`` (CAVIAR4REID, CUHK01) as ``(path, pid, camid)``:
    an identity's images ``n`` = 001, 002, ... come ``per_camera`` at a time from camera 0, then camera 1."""
    name = re.compile(rf"(\d{{4}})(\d{{3}}){re.escape(suffix)}")
    samples = []
    for path in images(base, (suffix,)):
        match = name.fullmatch(path.name)
        if match is None or int(match.group(2)) < 1:
            raise bad_name(path, f"<pid:04d><n:03d>{suffix} (n from 001)")
        samples.append((str(path), int(match.group(1)), (int(match.group(2)) - 1) // per_camera))
    return samples


def views_by_identity(viewed: Iterable[tuple[int, Sample]]) -> dict[int, tuple[list[Sample], list[Sample]]]:
    """Group ``(view, (path, pid, camid))`` pairs by identity into (view-0 samples, view-1 samples), in order."""
    views: dict[int, tuple[list[Sample], list[Sample]]] = {}
    for view, sample in viewed:
        views.setdefault(sample[1], ([], []))[view].append(sample)
    return views


def two_views(samples: list[Sample], view_a: set[int]) -> dict[int, tuple[list[Sample], list[Sample]]]:
    """Group ``(path, pid, camid)`` samples by identity into (cameras in ``view_a``, other cameras)."""
    return views_by_identity((0 if sample[2] in view_a else 1, sample) for sample in samples)


def _registry() -> dict[str, ModuleType]:
    from privreid.data.formats.dg import caviar, cuhk01, cuhk02, cuhksysu, grid, ilids, ilidsvid, prid, threedpes, viper

    return {"viper": viper, "grid": grid, "prid": prid, "ilids": ilids, "3dpes": threedpes, "caviar": caviar,
            "cuhk01": cuhk01, "cuhk02": cuhk02, "cuhksysu": cuhksysu, "ilidsvid": ilidsvid}


#: format name -> the module that reads it (see the module docstring)
DG_FORMATS: dict[str, ModuleType] = _registry()
