"""RegDB (Nguyen et al., Sensors 2017; split files of Ye et al.): ``regdb`` / ``regdb-<trial>``.

``RegDB/idx/{train,test}_{visible,thermal}_<trial>.txt`` with
``<relpath> <label>`` lines (paths relative to the root), trials 1-10
(``regdb`` is trial 1; each trial is its own train/test split, so run one
experiment per trial and average).  Camera 0 is visible, 1 thermal.
Query = test thermal, gallery = test visible, whole gallery, image CMC.
"""

from __future__ import annotations

import os

from privreid.data.formats.base import DETECT_FIRST, DatasetFormat, check_root, subfolder
from privreid.data.types import INFRARED, VISIBLE, ReIDDataset, Sample, VIProtocol
from privreid.errors import ConfigError

from privreid.data.formats.vi.common import marker, read_label_list, vi_dataset

LAYOUT = ("root/idx/{train,test}_{visible,thermal}_<trial>.txt with '<relpath> <label>' lines; trial 1 "
          "('regdb-<n>' for trial n of 1-10; the files may sit in root/RegDB/)")
_REGDB_TRIALS = range(1, 11)


def load_regdb(root: str | os.PathLike, trial: int = 1) -> ReIDDataset:
    """RegDB trial ``trial`` (1-10): thermal query, visible gallery; see the module docstring."""
    if trial not in _REGDB_TRIALS:
        raise ConfigError(f"RegDB trial must be in 1..10, got {trial}")
    base = subfolder(check_root(root), ("RegDB",))
    modality: dict[str, str] = {}

    def listed(split: str, kind: str, camid: int, mod: str) -> list[Sample]:
        return read_label_list(base, base / "idx" / f"{split}_{kind}_{trial}.txt", lambda rel: camid, mod, modality)

    train = listed("train", "visible", 0, VISIBLE) + listed("train", "thermal", 1, INFRARED)
    query = listed("test", "thermal", 1, INFRARED)
    gallery = listed("test", "visible", 0, VISIBLE)
    return vi_dataset("regdb" if trial == 1 else f"regdb-{trial}", base, train, query, gallery, modality,
                      VIProtocol())


FORMAT = DatasetFormat("regdb", LAYOUT, marker("RegDB", "idx", "train_visible_1.txt"),
                       lambda root, variant=None: load_regdb(root, int(variant or 1)),
                       priority=DETECT_FIRST + 1, family="vi", variant_pattern=r"\d+", variant_doc="<trial>")
