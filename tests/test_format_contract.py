"""Contract over every registered dataset format: it recognises its own fixture tree and refuses every other one.

Registering a format without a fixture here fails :func:`test_every_format_has_a_fixture`, so the
contract covers every format the registry holds.
"""

from pathlib import Path

import pytest
from test_dg_formats import (make_3dpes, make_caviar, make_cuhk01, make_cuhk02, make_cuhksysu, make_grid,
                             make_ilids, make_ilidsvid, make_prid, make_viper)
from test_formats import CUHK, DUKE, MARKET, PNG, make_market, make_msmt, write_images
from test_vi_formats import image, write_bupt, write_regdb, write_sysu, write_vcm

from privreid.data.formats import available_formats, detect_format


def _cuhk03np(root: Path) -> Path:
    for folder, names in CUHK["detected"].items():
        write_images(root / "cuhk03-np" / "detected" / folder, names, PNG)
    return root


def _llcm(root: Path) -> Path:
    (root / "LLCM" / "idx").mkdir(parents=True)
    (root / "LLCM" / "idx" / "train_vis.txt").write_text("train_vis/cam1/0001/a.jpg 0\n")
    return root


def _vi_folders(root: Path) -> Path:
    image(root / "train" / "visible" / "c1" / "0001" / "a.jpg")
    return root


def _bupt(root: Path) -> Path:
    write_bupt(root)
    return root


def _vcm(root: Path) -> Path:
    write_vcm(root)
    return root


def _regdb(root: Path) -> Path:
    write_regdb(root, 1, [1], [2])
    return root


#: format -> (builder of a tree in that layout, the format ``auto`` reads it as)
FIXTURES = {
    "market1501": (lambda r: make_market(r / "Market-1501-v15.09.15") and r, "market1501"),
    "dukemtmcreid": (lambda r: make_market(r / "DukeMTMC-reID", DUKE) and r, "dukemtmcreid"),
    "cuhk03np": (_cuhk03np, "cuhk03np"),
    "msmt17": (lambda r: make_msmt(r / "MSMT17_V1") and r, "msmt17"),
    "viper": (lambda r: make_viper(r, 3), "viper"),
    "grid": (lambda r: make_grid(r, 3, 1), "grid"),
    "prid": (lambda r: make_prid(r, 3, 4), "prid"),
    "ilids": (lambda r: make_ilids(r, 3, 6), "ilids"),
    "3dpes": (make_3dpes, "3dpes"),
    "caviar": (make_caviar, "caviar"),
    "cuhk01": (lambda r: make_cuhk01(r, 2), "cuhk01"),
    "cuhk02": (make_cuhk02, "cuhk02"),
    "cuhksysu": (make_cuhksysu, "cuhksysu"),
    "ilidsvid": (lambda r: make_ilidsvid(r, 2), "ilidsvid"),
    "sysu-mm01": (lambda r: write_sysu(r) and r, "sysu-mm01"),
    "sysu-mm01-indoor": (lambda r: write_sysu(r) and r, "sysu-mm01"),  # chosen by name only
    "regdb": (_regdb, "regdb"),
    "llcm": (_llcm, "llcm"),
    "hitsz-vcm": (_vcm, "hitsz-vcm"),
    "buptcampus": (_bupt, "buptcampus"),
    "vi-folders": (_vi_folders, "vi-folders"),
}


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    return {name: build(tmp_path_factory.mktemp(name.replace("-", "_"))) for name, (build, _) in FIXTURES.items()}


def test_every_format_has_a_fixture():
    assert set(FIXTURES) == set(available_formats())


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_format_detects_its_own_tree_and_refuses_the_others(name, trees):
    fmt = available_formats()[name]
    assert detect_format(trees[name]) == FIXTURES[name][1]  # what --format auto picks
    if fmt.detect is None:  # sysu-mm01-indoor: only by name
        return
    assert fmt.detect(trees[name])
    foreign = [other for other, (_, detected) in FIXTURES.items() if detected != FIXTURES[name][1]]
    accepted = [other for other in foreign if fmt.detect(trees[other])
                or (fmt.loose_detect is not None and fmt.loose_detect(trees[other]))]
    assert accepted == []
