"""Loaders for the visible-infrared (VI) ReID benchmarks of L2RW+ (paper 003, Sec. IV-A), images and video.

Each returns a :class:`~privreid.data.types.ReIDDataset` whose ``query`` / ``gallery`` are the
infrared-to-visible split (every L2RW+ table's mode), with ``modality`` per sample, the benchmark's
``vi_protocol`` (:class:`~privreid.data.types.VIProtocol`) and, for video, ``tracklets``. Train pids are
relabelled, query / gallery keep the released pids (one pid per identity in both modalities), camids 0-based;
layouts in ``docs/vi-datasets.md``. Modules: :mod:`.sysu_mm01`, :mod:`.regdb`, :mod:`.llcm`, :mod:`.hitsz_vcm`
and :mod:`.buptcampus` (video), :mod:`.vi_folders` (``privreid data synth --vi``), shared readers in
:mod:`.common`; :data:`VI_DATASET_FORMATS` registers them. Visible-to-infrared swaps query and gallery
(:func:`privreid.evaluation.cross_modality.mode_split`); for BUPTCampus that is not its own
visible-to-infrared split, which L2RW+ does not use.
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

