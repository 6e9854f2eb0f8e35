"""Loaders for the visible-infrared (VI) ReID benchmarks of L2RW+ (paper 003, Sec. IV-A), images and video.

Each loader returns a :class:`~privreid.data.types.ReIDDataset` whose
``query`` / ``gallery`` are the infrared-to-visible split (query infrared,
gallery visible: the mode every L2RW+ table uses), with ``modality`` (sample
path -> ``"visible"`` / ``"infrared"``) for every sample, the benchmark's
``vi_protocol`` (trials, CMC rule, co-located cameras; see
:class:`~privreid.data.types.VIProtocol`) and, for video, ``tracklets``
(sample key -> frame paths).  As for the RGB loaders, ``train`` pids are
relabelled ``0..N-1``, query/gallery keep the released pids, and camids are
0-based.  The released lists' own pid / camera numbering is used; nothing is
renumbered across modalities, so one identity has one pid in both.  The full
layouts are in ``docs/vi-datasets.md``.

Each benchmark is one module of this package holding its layout (``LAYOUT``,
the full description in its docstring), its loader and its registry entry
(``FORMAT``): :mod:`.sysu_mm01` (``sysu-mm01`` / ``sysu-mm01-indoor``),
:mod:`.regdb` (``regdb`` / ``regdb-<trial>``), :mod:`.llcm`, :mod:`.hitsz_vcm`
and :mod:`.buptcampus` (video), and :mod:`.vi_folders` (privreid's own
``vi-folders``, written by ``privreid data synth --vi``); the shared readers
are in :mod:`.common`.  :data:`VI_DATASET_FORMATS` registers them.

Visible-to-infrared evaluation swaps query and gallery
(:func:`privreid.evaluation.cross_modality.mode_split`).  For BUPTCampus
that is not its own visible-to-infrared split (query.txt's visible against
gallery.txt's infrared tracklets), which L2RW+ does not use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from privreid.data.formats.base import DatasetFormat
from privreid.data.types import ReIDDataset, Sample
from privreid.errors import ConfigError

from privreid.data.formats.vi import buptcampus, hitsz_vcm, llcm, regdb, sysu_mm01, vi_folders
from privreid.data.formats.vi.buptcampus import load_buptcampus
from privreid.data.formats.vi.hitsz_vcm import load_hitsz_vcm
from privreid.data.formats.vi.llcm import load_llcm
from privreid.data.formats.vi.regdb import load_regdb
from privreid.data.formats.vi.sysu_mm01 import load_sysu_mm01
from privreid.data.formats.vi.vi_folders import load_vi_folders

__all__ = [
    "VI_DATASET_FORMATS",
    "VI_FORMATS",
    "detect_vi_format",
    "frame_dataset",
    "is_vi_format",
    "load_buptcampus",
    "load_hitsz_vcm",
    "load_llcm",
    "load_regdb",
    "load_sysu_mm01",
    "load_vi_dataset",
    "load_vi_folders",
]

#: the VI formats as registry entries (:mod:`privreid.data.formats`), in the order ``auto`` tries them;
#: ``sysu-mm01-indoor`` is only chosen by name (auto-detection reads SYSU-MM01 as all-search)
VI_DATASET_FORMATS: tuple[DatasetFormat, ...] = (sysu_mm01.FORMAT, sysu_mm01.INDOOR_FORMAT, regdb.FORMAT, llcm.FORMAT,
                                                 hitsz_vcm.FORMAT, buptcampus.FORMAT, vi_folders.FORMAT)
#: format name -> its layout, one line
VI_FORMATS: dict[str, str] = {fmt.name: fmt.layout for fmt in VI_DATASET_FORMATS}


def is_vi_format(fmt: str) -> bool:
    """Whether ``fmt`` names a VI format (a key of :data:`VI_FORMATS` or ``regdb-<trial>``)."""
    return fmt in VI_FORMATS or re.fullmatch(r"regdb-\d+", fmt) is not None


def load_vi_dataset(root: str | os.PathLike, fmt: str) -> ReIDDataset:
    """Load ``root`` in VI format ``fmt`` (see :func:`is_vi_format`)."""
    if fmt in ("sysu-mm01", "sysu-mm01-indoor"):
        return load_sysu_mm01(root, "indoor" if fmt.endswith("indoor") else "all")
    if fmt == "regdb" or fmt.startswith("regdb-"):
        trial = fmt.partition("-")[2]
        if trial and not trial.isdigit():
            raise ConfigError(f"unknown VI format {fmt!r}; RegDB trials are regdb-1 .. regdb-10")
        return load_regdb(root, int(trial or 1))
    loaders: dict[str, Callable[[str | os.PathLike], ReIDDataset]] = {
        "llcm": load_llcm, "hitsz-vcm": load_hitsz_vcm, "buptcampus": load_buptcampus, "vi-folders": load_vi_folders,
    }
    if fmt not in loaders:
        raise ConfigError(f"unknown VI format {fmt!r}; choose one of: {', '.join(VI_FORMATS)}, regdb-<trial>")
    return loaders[fmt](root)


def detect_vi_format(root: str | os.PathLike) -> str | None:
    """The VI format whose layout ``root`` follows (SYSU-MM01 as all-search, RegDB as trial 1), or None."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return None
    for fmt in VI_DATASET_FORMATS:
        if fmt.detect is not None and fmt.detect(root):
            return fmt.name
    return None


def frame_dataset(ds: ReIDDataset) -> ReIDDataset:
    """A video dataset with every tracklet expanded into its frames (one sample per frame), e.g. to verify files."""
    if ds.tracklets is None:
        return ds

    def frames(samples: list[Sample]) -> list[Sample]:
        return [(frame, pid, cam) for key, pid, cam in samples for frame in ds.tracklets[key]]

    return ReIDDataset(ds.name, frames(ds.train), frames(ds.query), frames(ds.gallery), root=ds.root)

