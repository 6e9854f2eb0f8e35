"""Bad datasets: a ``--format`` the tree does not follow is refused in one ``error:`` line naming the format the
tree looks like (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from badinput import BadInput, check_refused


def market_tree(tmp: Path, name: str = "market", camera_sep: str = "s1_000001_00") -> None:
    """A small Market-1501 tree (``camera_sep="_f000001"``: DukeMTMC-reID's file names)."""
    for split, pids in (("bounding_box_train", (1, 2)), ("query", (5,)), ("bounding_box_test", (5,))):
        (tmp / name / split).mkdir(parents=True)
        for pid in pids:
            for cam in (1, 2):
                Image.new("RGB", (16, 32), (pid * 20, cam * 50, 0)).save(
                    tmp / name / split / f"{pid:04d}_c{cam}{camera_sep}.jpg")


def duke_tree(tmp: Path) -> None:
    market_tree(tmp, "duke", "_f000001")


CASES = [
    BadInput("market-tree-as-duke", ("data", "info", "{tmp}/market", "--format", "dukemtmcreid"),
             keep=("market",), setup=market_tree, says="looks like a market1501 dataset, not dukemtmcreid"),
    BadInput("market-tree-as-duke-colon", ("data", "info", "{tmp}/market:dukemtmcreid"),
             keep=("market",), setup=market_tree, says="looks like a market1501 dataset"),
    BadInput("duke-tree-as-market", ("data", "info", "{tmp}/duke", "--format", "market1501"),
             keep=("duke",), setup=duke_tree, says="looks like a dukemtmcreid dataset, not market1501"),
    BadInput("market-tree-as-msmt17", ("data", "info", "{tmp}/market", "--format", "msmt17"),
             keep=("market",), setup=market_tree, says="looks like a market1501 dataset, not msmt17"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused(case, tmp_path):
    check_refused(case, tmp_path)


def _damage(tmp: Path, how: str) -> None:
    market_tree(tmp)
    query = sorted((tmp / "market" / "query").iterdir())
    for path in query[:2]:
        data = path.read_bytes()
        path.write_bytes(b"" if how == "zero-byte" else data[:-3])  # headers intact, the scan cut short


def _png_tree(tmp: Path) -> None:
    market_tree(tmp)
    path = tmp / "market" / "query" / "0005_c1s1_000001_00.jpg"
    Image.open(path).save(path.with_suffix(".png"))
    png = path.with_suffix(".png")
    png.write_bytes(png.read_bytes()[:-30])
    path.unlink()


@pytest.mark.parametrize("how", ["zero-byte", "truncated"])
def test_damaged_jpegs_are_refused_naming_the_first_and_the_count(how, tmp_path):
    case = BadInput(f"{how}-jpeg", ("data", "info", "{tmp}/market"), keep=("market",),
                    setup=lambda tmp: _damage(tmp, how), says="2 of 8 images of market")
    line = check_refused(case, tmp_path)
    assert "0005_c1s1_000001_00.jpg" in line


def test_a_truncated_png_is_refused(tmp_path):
    from privreid.data.formats import load_dataset, verify_images
    from privreid.errors import DataError

    _png_tree(tmp_path)
    ds = load_dataset(tmp_path / "market", "market1501")
    ds.query.append((str(tmp_path / "market" / "query" / "0005_c1s1_000001_00.png"), 5, 0))
    with pytest.raises(DataError, match=r"0005_c1s1_000001_00.png: .*\(1 of"):
        verify_images(ds, splits=("query",))
