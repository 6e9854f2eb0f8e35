"""Per-split statistics of a dataset, as in Table 1 of ReID papers and torchreid's summary.

Identities are counted as distinct pids, so Market-1501's gallery counts the
distractor pid ``0`` as one identity (751 gallery identities, as torchreid
prints); junk images are not counted because the loaders drop them.
"""

from __future__ import annotations

from collections.abc import Iterable

from privreid.data.types import ReIDDataset, Sample

SPLITS = ("train", "query", "gallery")


def split_stats(samples: Iterable[Sample]) -> dict[str, int]:
    """``{"identities", "images", "cameras"}`` counts of one list of samples."""
    samples = list(samples)
    return {
        "identities": len({pid for _, pid, _ in samples}),
        "images": len(samples),
        "cameras": len({camid for _, _, camid in samples}),
    }


def dataset_stats(ds: ReIDDataset) -> dict[str, dict[str, int]]:
    """``{split: split_stats(...)}`` for the ``train``, ``query`` and ``gallery`` splits of ``ds``."""
    return {split: split_stats(getattr(ds, split)) for split in SPLITS}


def format_stats_table(ds: ReIDDataset | Iterable[ReIDDataset]) -> str:
    """A plain-text table of :func:`dataset_stats`: one row per split, for one or several datasets.

    Example::

        dataset     split    #ids  #images  #cams
        ----------  -------  ----  -------  -----
        market1501  train     751    12936      6
                    query     750     3368      6
                    gallery   751    15913      6
    """
    datasets = [ds] if isinstance(ds, ReIDDataset) else list(ds)
    header = ("dataset", "split", "#ids", "#images", "#cams")
    rows = []
    for dataset in datasets:
        for split, counts in dataset_stats(dataset).items():
            label = dataset.name if split == SPLITS[0] else ""
            rows.append((label, split, str(counts["identities"]), str(counts["images"]), str(counts["cameras"])))
    widths = [max(len(row[col]) for row in [header, *rows]) for col in range(len(header))]

    def line(cells) -> str:
        text = [cell.ljust(w) if col < 2 else cell.rjust(w) for col, (cell, w) in enumerate(zip(cells, widths))]
        return "  ".join(text).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)])
