"""Loaders for the small unseen-domain benchmarks of domain-generalisable ReID (papers 002, 000, 004, 001).

Each dataset is one module defining ``RELEASE`` (a :class:`~.common.ReleaseTree`) and ``read_pool(base)`` (a
:class:`~.common.DGPool`); :data:`DG_FORMATS` registers them. Layouts follow torchreid where it has the dataset,
the original release otherwise (3DPeS, CAVIAR4REID); docs/datasets.md draws each tree. A ``DGPool`` is the
whole dataset before any split: every identity's images in two views (query and gallery camera) plus
gallery-only distractors; :mod:`privreid.data.formats.dg.splits` draws the splits. :func:`load_dg_dataset`
returns split 0 of seed 0 (torchreid's ``split_id=0``), what training uses: ``--data DIR`` the ``dg`` split's
train identities (CUHK02: P1-P4, as FedARKS), ``DIR:<format>-fedpav`` FedPav's client split (PRID, CUHK01,
VIPeR, 3DPeS, i-LIDS; paper 004, Table 1).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from privreid.data.formats.base import DETECT_SMALL, DatasetFormat
from privreid.data.formats.dg.common import DGPool
from privreid.data.types import ReIDDataset
from privreid.errors import ConfigError, DataError

__all__ = ["DG_FORMATS", "dataset_format", "load_dg_dataset", "load_pool"]


def load_pool(root: str | os.PathLike, fmt: str) -> DGPool:
    """Read ``root`` in format ``fmt``; :class:`DataError` naming the expected layout when it does not fit."""
    if fmt not in DG_FORMATS:
        raise ConfigError(f"unknown dataset format {fmt!r}; choose one of: {', '.join(DG_FORMATS)}")
    root, module = Path(root).expanduser().absolute(), DG_FORMATS[fmt]
    if not root.is_dir():
        raise DataError(f"dataset root {root} does not exist; {fmt} expects {module.RELEASE.layout}")
    base = module.RELEASE.find(root)
    if base is None:
        raise DataError(f"{root} is not in the {fmt} layout; expected {module.RELEASE.layout}")
    pool = module.read_pool(base)
    if len(pool.paired_ids) < 2:
        raise DataError(f"{fmt} at {base}: fewer than two identities seen in both views; expected "
                        f"{module.RELEASE.layout}")
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


def _registry() -> dict[str, ModuleType]:
    from privreid.data.formats.dg import caviar, cuhk01, cuhk02, cuhksysu, grid, ilids, ilidsvid, prid, threedpes, viper

    return {"viper": viper, "grid": grid, "prid": prid, "ilids": ilids, "3dpes": threedpes, "caviar": caviar,
            "cuhk01": cuhk01, "cuhk02": cuhk02, "cuhksysu": cuhksysu, "ilidsvid": ilidsvid}


#: format name -> the module that reads it (see the module docstring)
DG_FORMATS: dict[str, ModuleType] = _registry()
