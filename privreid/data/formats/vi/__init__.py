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

from privreid.data.formats.base import DatasetFormat
from privreid.data.formats.vi import buptcampus, hitsz_vcm, llcm, regdb, sysu_mm01, vi_folders
from privreid.data.types import ReIDDataset, Sample

__all__ = ["VI_DATASET_FORMATS", "frame_dataset"]

#: the VI formats as registry entries (:mod:`privreid.data.formats`), in the order ``auto`` tries them;
#: ``sysu-mm01-indoor`` is only chosen by name (auto-detection reads SYSU-MM01 as all-search)
VI_DATASET_FORMATS: tuple[DatasetFormat, ...] = (sysu_mm01.FORMAT, sysu_mm01.INDOOR_FORMAT, regdb.FORMAT, llcm.FORMAT,
                                                 hitsz_vcm.FORMAT, buptcampus.FORMAT, vi_folders.FORMAT)


def frame_dataset(ds: ReIDDataset) -> ReIDDataset:
    """A video dataset with every tracklet expanded into its frames (one sample per frame), e.g. to verify files."""
    if ds.tracklets is None:
        return ds

    def frames(samples: list[Sample]) -> list[Sample]:
        return [(frame, pid, cam) for key, pid, cam in samples for frame in ds.tracklets[key]]

    return ReIDDataset(ds.name, frames(ds.train), frames(ds.query), frames(ds.gallery), root=ds.root)

