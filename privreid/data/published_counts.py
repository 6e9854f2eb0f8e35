"""The dataset sizes a paper publishes, and the check of a loaded dataset against them (``privreid data info``).

:data:`FEDPAV_TABLE1` is FedPav's Table 1 (paper 004, FedReIDBench): for
each of its nine clients, ``(identities, images)`` of the train, query and
gallery splits, keyed by the ``--format`` spelling that reads the dataset as
the paper splits it (``DIR:prid-fedpav``: :mod:`privreid.data.formats.dg.splits`,
protocol ``fedpav``).  Where privreid's counts differ for a known reason,
:data:`FEDPAV_TABLE1_NOTES` says why.
"""

from __future__ import annotations

from privreid.data.stats import SPLITS, dataset_stats
from privreid.data.types import ReIDDataset
from privreid.errors import ConfigError

PAPER = "FedPav Table 1 (paper 004)"

#: format spelling -> ((train ids, images), (query ids, images), (gallery ids, images)), as the paper prints them
FEDPAV_TABLE1: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    "msmt17": ((1041, 32621), (3060, 11659), (3060, 82161)),
    "dukemtmcreid": ((702, 16522), (702, 2228), (1110, 17611)),
    "market1501": ((751, 12936), (750, 3368), (751, 19732)),
    "cuhk03np-detected": ((767, 7365), (700, 1400), (700, 5332)),
    "prid-fedpav": ((285, 3744), (100, 100), (649, 649)),
    "cuhk01-fedpav": ((485, 1940), (486, 972), (486, 972)),
    "viper-fedpav": ((316, 632), (316, 316), (316, 316)),
    "3dpes-fedpav": ((93, 450), (86, 246), (100, 316)),
    "ilids-fedpav": ((59, 248), (60, 98), (60, 130)),  # the paper's "iLIDS-VID" is QMUL i-LIDS (reference meta.json)
}

_DRAW = ("the paper's counts are those of its own random split (the reference's split.json, not published); "
         "privreid draws its own, seed 0")
#: (format spelling, "<split> <identities|images>") -> why privreid's count differs from the paper's
FEDPAV_TABLE1_NOTES: dict[tuple[str, str], str] = {
    ("market1501", "gallery images"): "the paper counts every file of bounding_box_test, the 3,819 junk images "
                                      "(pid -1) included; privreid drops them, as torchreid does (15,913)",
    ("dukemtmcreid", "gallery images"): "the release's bounding_box_test holds 17,661 images (torchreid's count); "
                                        "the paper prints 17,611",
    ("prid-fedpav", "train images"): "FedPav's clients train on up to 10 frames per camera of each person's "
                                     "multi_shot sequence (Cysu/dgd_person_reid data/format_prid.py): without "
                                     "multi_shot/ beside single_shot/, privreid trains on the single-shot images; "
                                     "with it, " + _DRAW,
    ("3dpes-fedpav", "query identities"): _DRAW + "; a test person seen by one camera is gallery-only",
    **{(fmt, f"{split} images"): _DRAW for fmt in ("3dpes-fedpav", "ilids-fedpav") for split in SPLITS},
}


def paper_spelling(fmt: str) -> str | None:
    """The :data:`FEDPAV_TABLE1` spelling of the dataset that format ``fmt`` reads (``prid`` -> ``prid-fedpav``),
    or ``None`` when the table does not have it."""
    from privreid.data.formats import get_format

    if fmt in FEDPAV_TABLE1:
        return fmt
    try:
        base = get_format(fmt)[0].name
    except ConfigError:  # a user's dataset name that is no registered format
        return None
    return next((s for s in FEDPAV_TABLE1 if get_format(s)[0].name == base), None)


def check_counts(fmt: str, ds: ReIDDataset) -> list[str]:
    """Lines comparing ``ds`` (read with format ``fmt``) with :data:`FEDPAV_TABLE1` (empty: not in the table).

    Each differing count is flagged with ``!=``, and the reason where it is known.
    """
    spelling = paper_spelling(fmt)
    if spelling is None:
        return []
    if spelling != fmt:
        return [f"{PAPER} splits this dataset as --data DIR:{spelling}; read as {fmt}, its counts are not compared"]
    counts = dataset_stats(ds)
    lines = []
    for split, (ids, images) in zip(SPLITS, FEDPAV_TABLE1[fmt]):
        ours = counts[split]
        for label, mine, paper in (("identities", ours["identities"], ids), ("images", ours["images"], images)):
            if mine != paper:
                note = FEDPAV_TABLE1_NOTES.get((fmt, f"{split} {label}"))
                lines.append(f"{split} {label}: {mine:,} != {paper:,} in {PAPER}" + (f" ({note})" if note else ""))
    return lines or [f"every count matches {PAPER}"]
