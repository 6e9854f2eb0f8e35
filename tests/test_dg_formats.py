"""The small DG benchmarks' loaders (privreid.data.formats.dg) and their split protocols, on fixture trees
written with each release's real file names (full-size for the four DG-ReID test sets, so that the standard
test sizes are checked against the real identity counts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from privreid.data.formats import detect_format, load_dataset
from privreid.data.formats.dg import DG_FORMATS, load_pool
from privreid.data.formats.dg.splits import make_splits, read_splits, split_dataset, write_splits
from privreid.errors import ConfigError, DataError


def _img(path: Path, value: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = {".bmp": "BMP", ".png": "PNG"}.get(path.suffix, "JPEG")
    Image.new("RGB", (2, 4), (value % 256, 0, 0)).save(path, fmt)


def make_viper(root: Path, n: int = 632) -> Path:
    for i in range(n):
        _img(root / "viper" / "VIPeR" / "cam_a" / f"{i:03d}_45.bmp")
        _img(root / "viper" / "VIPeR" / "cam_b" / f"{i:03d}_90.bmp")
    return root


def make_prid(root: Path, cam_a: int = 385, cam_b: int = 749) -> Path:
    base = root / "prid2011" / "prid_2011" / "single_shot"
    for i in range(1, cam_a + 1):
        _img(base / "cam_a" / f"person_{i:04d}.png")
    for i in range(1, cam_b + 1):
        _img(base / "cam_b" / f"person_{i:04d}.png")
    return root


def make_grid(root: Path, paired: int = 250, distractors: int = 775) -> Path:
    base = root / "underground_reid"
    for i in range(1, paired + 1):
        _img(base / "probe" / f"{i:04d}_{1 + i % 8}_25004_107_32_106_221.jpeg")
        _img(base / "gallery" / f"{i:04d}_{1 + (i + 1) % 8}_25004_107_32_106_221.jpeg")
    for j in range(distractors):
        _img(base / "gallery" / f"0000_{1 + j % 8}_{j:05d}_10_32_106_221.jpeg")
    (base / "features_and_partitions.mat").write_bytes(b"")
    return root


def make_ilids(root: Path, ids: int = 119, total: int = 476) -> Path:
    counts = [total // ids + (1 if k < total % ids else 0) for k in range(ids)]
    for pid, count in enumerate(counts, start=1):
        for n in range(1, count + 1):
            _img(root / "i-LIDS_Pedestrian" / "Persons" / f"{pid:04d}{n:03d}.jpg")
    return root


def make_3dpes(root: Path) -> Path:
    # identity 1: cameras 2 and 5; identity 2: camera 3 only; identities 3, 4: cameras 1 and 2
    for pid, cams in ((1, (2, 2, 5)), (2, (3,)), (3, (1, 2)), (4, (1, 2, 2))):
        for k, cam in enumerate(cams):
            _img(root / "3DPeS" / "RGB" / f"{pid:03d}_{cam}_2010061{k}_0001.bmp")
    return root


def make_caviar(root: Path, paired: int = 3, single: int = 1) -> Path:
    """Identities 1..paired in both cameras (10 + 10 images), the next ``single`` in camera 1 only
    (the release: 50 and 22)."""
    for pid in range(1, paired + single + 1):
        for n in range(1, 21 if pid <= paired else 11):
            _img(root / "CAVIAR4REID" / "CAVIARa" / f"{pid:04d}{n:03d}.jpg")
    return root


def make_cuhk01(root: Path, ids: int = 6) -> Path:
    for pid in range(1, ids + 1):
        for n in range(1, 5):
            _img(root / "cuhk01" / "campus" / f"{pid:04d}{n:03d}.png")
    return root


def make_cuhk02(root: Path) -> Path:
    for k, ids in enumerate((3, 2, 2, 2, 3), start=1):
        for pid in range(1, ids + 1):
            for cam in (1, 2):
                for n in (1, 2):
                    _img(root / "cuhk02" / "Dataset" / f"P{k}" / f"cam{cam}" / f"{pid:03d}_{n}.png")
    return root


def make_ilidsvid(root: Path, ids: int = 6) -> Path:
    for pid in range(1, ids + 1):
        for cam in (1, 2):
            _img(root / "i-LIDS-VID" / "images" / f"cam{cam}" / f"person{pid:03d}" / f"cam{cam}_person{pid:03d}.png")
    return root


def make_cuhksysu(root: Path) -> Path:
    """Persons 1-3 are queries (scenes 1-3); scenes 4-6 hold persons 1, 2, 3 and 4; person 5 trains only."""
    from scipy.io import savemat

    crops = {1: [(1, 1), (1, 4)], 2: [(2, 2), (2, 5)], 3: [(3, 3), (3, 6)], 4: [(4, 4), (4, 6)],
             5: [(5, 7), (5, 8)]}
    for pid, shots in crops.items():
        for scene, _ in [(s, 0) for _, s in shots]:
            _img(root / "cuhksysu" / "cropped_images" / f"p{pid}_s{scene}_1.jpg")
    entries = np.empty((1, 3), dtype=[("Query", "O"), ("Gallery", "O")])
    for k, (pid, galleries) in enumerate(((1, (4, 5)), (2, (5, 6)), (3, (4, 6)))):
        entries[0, k]["Query"] = {"imname": f"s{pid}.jpg", "idname": f"p{pid}", "idlocate": np.zeros(4)}
        gallery = np.empty((1, len(galleries)), dtype=[("imname", "O"), ("idlocate", "O")])
        for j, scene in enumerate(galleries):
            gallery[0, j]["imname"] = f"s{scene}.jpg"
            gallery[0, j]["idlocate"] = np.zeros(4)
        entries[0, k]["Gallery"] = gallery
    path = root / "cuhksysu" / "annotation" / "test" / "train_test"
    path.mkdir(parents=True)
    savemat(str(path / "TestG100.mat"), {"TestG100": entries})
    return root


BUILDERS = {"viper": make_viper, "prid": make_prid, "grid": make_grid, "ilids": make_ilids, "3dpes": make_3dpes,
            "caviar": make_caviar, "cuhk01": make_cuhk01, "cuhk02": make_cuhk02, "cuhksysu": make_cuhksysu,
            "ilidsvid": make_ilidsvid}


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    return {name: build(tmp_path_factory.mktemp(name)) for name, build in BUILDERS.items()}


def test_every_format_has_a_builder_and_is_auto_detected(trees):
    assert set(BUILDERS) == set(DG_FORMATS)
    for name, root in trees.items():
        assert detect_format(root) == name


@pytest.mark.parametrize("name,test_ids,query,gallery", [
    ("viper", 316, 316, 316), ("prid", 100, 100, 649), ("grid", 125, 125, 900), ("ilids", 60, 60, 60)])
def test_dg_protocol_standard_test_sizes(trees, name, test_ids, query, gallery):
    """Song et al.'s sizes: VIPeR 316/316, PRID 100 vs 649, GRID 125 vs 900, i-LIDS 60 test ids."""
    pool = load_pool(trees[name], name)
    splits = make_splits(pool, "dg", num_splits=10, seed=0)
    assert len(splits) == 10
    for split in splits:
        assert len(split.test_ids) == test_ids
        assert (len(split.query), len(split.gallery)) == (query, gallery)
        assert {pid for _, pid, _ in split.query} == set(split.test_ids)
        assert not set(split.train_ids) & set(split.test_ids)
        assert {cam for _, _, cam in split.query} == {0} and {cam for _, _, cam in split.gallery} == {1}
        # single-shot: each test identity once in the query and once in the gallery
        real = [pid for _, pid, _ in split.gallery if pid in set(split.test_ids)]
        assert sorted(real) == split.test_ids
    assert len({tuple(s.test_ids) for s in splits}) == 10  # ten different random halves


def test_prid_views_and_distractors(trees):
    pool = load_pool(trees["prid"], "prid")
    assert pool.paired_ids == list(range(1, 201))
    assert [pid for _, pid, _ in pool.distractors] == list(range(201, 750))
    assert [pid for pid, (a, b) in pool.views.items() if not b] == list(range(201, 386))  # camera A only: train
    ds = load_dataset(trees["prid"], "prid")
    assert ds.num_train_pids == 285 and ds.num_train_cams == 2 and len(ds.train) == 385
    assert all(Path(p).parent.name == "cam_a" for p, _, _ in ds.query)


def test_grid_distractors_are_pid_zero_gallery_only(trees):
    pool = load_pool(trees["grid"], "grid")
    assert len(pool.paired_ids) == 250 and len(pool.distractors) == 775
    split = make_splits(pool, "dg", num_splits=1)[0]
    assert sum(pid == 0 for _, pid, _ in split.gallery) == 775
    cross = make_splits(pool, "crosscam", num_splits=1)[0]  # FedPav Table 5: all 250, no distractors
    assert len(cross.query) == len(cross.gallery) == 250 and not cross.train_ids


def test_ilids_query_and_gallery_are_distinct_images_of_one_person(trees):
    pool = load_pool(trees["ilids"], "ilids")
    assert len(pool.views) == 119 and sum(len(a) for a, _ in pool.views.values()) == 476
    for split in make_splits(pool, num_splits=3, seed=4):
        for (qp, qid, _), (gp, gid, _) in zip(split.query, split.gallery):
            assert qid == gid and qp != gp and Path(qp).name[:4] == f"{qid:04d}"


def test_3dpes_first_camera_is_the_query_view(trees):
    pool = load_pool(trees["3dpes"], "3dpes")
    a, b = pool.views[1]
    assert [cam for _, _, cam in a] == [1, 1] and [cam for _, _, cam in b] == [4]
    assert pool.paired_ids == [1, 3, 4]  # identity 2 has one camera: train only


def test_caviar_cameras_from_the_image_number(trees):
    pool = load_pool(trees["caviar"], "caviar")
    a, b = pool.views[1]
    assert [Path(p).name[4:] for p, _, _ in a] == [f"{n:03d}.jpg" for n in range(1, 11)]
    assert [Path(p).name[4:] for p, _, _ in b] == [f"{n:03d}.jpg" for n in range(11, 21)]
    assert pool.paired_ids == [1, 2, 3]
    cross = make_splits(pool, "crosscam", num_splits=2)  # 36 wanted, 3 available: all three, multi-shot
    assert all(len(s.query) == len(s.gallery) == 30 for s in cross)
    ds = split_dataset(pool, cross[0])
    assert len(ds.train) == 10  # identity 4 (one camera) is trained on


def test_cuhk01_views_pair_images_1_2_and_3_4(trees):
    pool = load_pool(trees["cuhk01"], "cuhk01")
    a, b = pool.views[2]
    assert [Path(p).name for p, _, _ in a] == ["0002001.png", "0002002.png"]
    assert [cam for _, _, cam in b] == [1, 1]
    ds = load_dataset(trees["cuhk01"], "cuhk01")  # every view-A image against every view-B image
    assert ds.num_train_pids == 3 and len(ds.query) == len(ds.gallery) == 6


def test_cuhk02_p5_is_the_fixed_test_pair(trees):
    pool = load_pool(trees["cuhk02"], "cuhk02")
    assert pool.fixed_test == [400001, 400002, 400003]
    ds = load_dataset(trees["cuhk02"], "cuhk02")
    assert ds.num_train_pids == 9 and ds.num_train_cams == 8
    assert {pid for _, pid, _ in ds.query} == {400001, 400002, 400003}


def test_ilidsvid_key_images(trees):
    pool = load_pool(trees["ilidsvid"], "ilidsvid")
    assert pool.paired_ids == list(range(1, 7))
    assert Path(pool.views[3][1][0][0]).name == "cam2_person003.png"


def test_cuhksysu_g100_galleries(trees):
    from privreid.data.formats.dg.cuhksysu import RELEASE, read_g100

    pairs = read_g100(RELEASE.find(trees["cuhksysu"]))
    names = [(Path(q[0]).name, sorted(Path(g[0]).name for g in gallery)) for q, gallery in pairs]
    assert names == [("p1_s1_1.jpg", ["p1_s4_1.jpg", "p2_s5_1.jpg", "p4_s4_1.jpg"]),
                     ("p2_s2_1.jpg", ["p2_s5_1.jpg", "p3_s6_1.jpg", "p4_s6_1.jpg"]),
                     ("p3_s3_1.jpg", ["p1_s4_1.jpg", "p3_s6_1.jpg", "p4_s4_1.jpg", "p4_s6_1.jpg"])]
    ds = load_dataset(trees["cuhksysu"], "cuhksysu")
    assert {pid for _, pid, _ in ds.query} == {1, 2, 3} and ds.num_train_pids == 2


def test_splits_are_seeded_and_round_trip(trees, tmp_path):
    pool = load_pool(trees["viper"], "viper")
    first = make_splits(pool, num_splits=3, seed=7)
    again = make_splits(pool, num_splits=3, seed=7)
    other = make_splits(pool, num_splits=3, seed=8)
    assert [s.test_ids for s in first] == [s.test_ids for s in again]
    assert [s.test_ids for s in first] != [s.test_ids for s in other]
    path = write_splits(tmp_path / "splits.json", pool, first)
    assert not any(Path(p).is_absolute() for s in json.loads(path.read_text())["splits"] for p, _, _ in s["query"])
    back = read_splits(path, pool)
    assert [(s.test_ids, s.query, s.gallery) for s in back] == [(s.test_ids, s.query, s.gallery) for s in first]
    with pytest.raises(DataError, match="splits of viper, not of prid"):
        read_splits(path, load_pool(trees["prid"], "prid"))


def test_wrong_layout_names_the_expected_tree(tmp_path):
    (tmp_path / "somewhere").mkdir()
    with pytest.raises(DataError, match=r"not in the viper layout; expected root/VIPeR/\{cam_a,cam_b\}"):
        load_pool(tmp_path, "viper")
    with pytest.raises(DataError, match="does not exist"):
        load_pool(tmp_path / "missing", "grid")
    with pytest.raises(ConfigError, match="unknown split protocol"):
        make_splits(load_pool(make_cuhk01(tmp_path / "c"), "cuhk01"), "loo")
    with pytest.raises(ConfigError, match="cross-camera protocol is defined for caviar, grid, cuhk01, cuhk02, "
                                          "not viper"):
        make_splits(load_pool(make_viper(tmp_path / "v", n=4), "viper"), "crosscam")


def test_bad_file_name_is_reported(tmp_path):
    make_cuhk01(tmp_path, ids=3)
    _img(tmp_path / "cuhk01" / "campus" / "person1.png")
    with pytest.raises(DataError, match=r"person1.png does not follow the <pid:04d><n:03d>.png"):
        load_pool(tmp_path, "cuhk01")
