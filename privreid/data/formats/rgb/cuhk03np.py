"""CUHK03-NP: the *directory* release of CUHK03's new (767/700) protocol (Zhong et al., CVPR 2017).

``detected/`` and ``labeled/`` folders in the Market-1501 layout with
``.png`` images; ``--format cuhk03np-detected`` (the default) or
``cuhk03np-labeled`` picks one.  This is not torchreid's ``cuhk03`` route,
which rebuilds the images from ``cuhk-03.mat`` plus split json files.
"""

from __future__ import annotations

from pathlib import Path

from privreid.data.types import ReIDDataset
from privreid.errors import ConfigError

from privreid.data.formats.base import DETECT_RELEASE, DatasetFormat, check_root, load_market_layout, subfolder

VARIANTS = ("detected", "labeled")
RELEASE = "cuhk03-np"
LAYOUT = ("root/{detected,labeled}/{bounding_box_train,query,bounding_box_test}/*.png named "
          "<pid>_c<cam>_<n>.png (e.g. 0001_c1_1.png), cameras c1-c2 (CUHK03-NP new-protocol release); "
          "variant 'detected' (default) or 'labeled'; the folders may sit in root/cuhk03-np/")


def check_variant(variant: str | None) -> str:
    """``variant`` or the default ``"detected"``; :class:`ConfigError` for an unknown one."""
    if variant is not None and variant not in VARIANTS:
        raise ConfigError(f"unknown cuhk03np variant {variant!r}; choose one of: {', '.join(VARIANTS)}")
    return variant or "detected"


def detect(root: Path) -> bool:
    return any((subfolder(root, (RELEASE,)) / v / "bounding_box_train").is_dir() for v in VARIANTS)


def load(root: Path, variant: str | None = None) -> ReIDDataset:
    variant = check_variant(variant)
    return load_market_layout(f"cuhk03np-{variant}", subfolder(check_root(root), (RELEASE,)) / variant, (".png", ".jpg"))


FORMAT = DatasetFormat("cuhk03np", LAYOUT, detect=detect, load=load, priority=DETECT_RELEASE, family="rgb",
                       variant_pattern=r".+", variant_doc="{" + ",".join(VARIANTS) + "}")
