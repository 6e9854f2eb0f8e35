"""Test protocols as the papers' tables and code define them (issue 25, section 1):
CAVIAR4REID's 36 test identities (FedReID Table I), CUHK01 / CUHK02 every view-A image against every view-B
image (torchreid, FedPav Table 1), CUHK-SYSU's 2,900 queries against a gallery without distractors (FedReID
Table I), FedPav's i-LIDS client, MSMT17's two training sets, LLCM's query cameras (L2RW+'s code), on fixture
trees with the releases' file names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privreid.data.formats import load_dataset
from privreid.data.formats.dg import load_pool
from privreid.data.formats.dg.splits import make_splits

from test_dg_formats import make_caviar, make_cuhk01, make_cuhk02, make_cuhksysu, make_ilids


def test_caviar_dg_split_tests_36_of_the_50_paired_people_single_shot(tmp_path):
    """FedReID Table I: 36 test identities, 72 test images (one query in camera 1, one gallery image in camera 2
    each); half of the 50 paired people (25, the generic rule) would not give those sizes."""
    pool = load_pool(make_caviar(tmp_path, paired=50, single=22), "caviar")
    assert len(pool.paired_ids) == 50 and len(pool.views) == 72
    for split in make_splits(pool, "dg", num_splits=3, seed=0):
        assert len(split.test_ids) == 36 and set(split.test_ids) <= set(pool.paired_ids)
        assert (len(split.query), len(split.gallery)) == (36, 36)  # 72 test images
        assert [pid for _, pid, _ in split.query] == [pid for _, pid, _ in split.gallery] == split.test_ids
        assert all(int(Path(p).stem[4:]) <= 10 for p, _, _ in split.query)  # camera 1: images 001-010
        assert all(int(Path(p).stem[4:]) >= 11 for p, _, _ in split.gallery)  # camera 2: images 011-020
        assert len(split.train_ids) == 14 + 22  # the other paired people and the one-camera people


def test_cuhk01_tests_every_view_a_image_against_every_view_b_image(tmp_path):
    """FedPav Table 1 (its data_preprocess, as torchreid's cuhk01.py): 485 train ids, 486 test ids with
    972 query and 972 gallery images."""
    ds = load_dataset(make_cuhk01(tmp_path, ids=971), "cuhk01")
    assert ds.num_train_pids == 485 and len(ds.train) == 1940
    assert (len({pid for _, pid, _ in ds.query}), len(ds.query), len(ds.gallery)) == (486, 972, 972)
    assert {Path(p).name[4:] for p, _, _ in ds.query} == {"001.png", "002.png"}
    assert {Path(p).name[4:] for p, _, _ in ds.gallery} == {"003.png", "004.png"}


def test_cuhk02_tests_every_p5_cam1_image_against_every_p5_cam2_image(tmp_path):
    """torchreid's cuhk02.py: P5's cam1 images are the query, its cam2 images the gallery."""
    ds = load_dataset(make_cuhk02(tmp_path), "cuhk02")
    assert sorted(Path(p).relative_to(Path(p).parents[2]).as_posix() for p, _, _ in ds.query) == [
        f"P5/cam1/{pid:03d}_{n}.png" for pid in (1, 2, 3) for n in (1, 2)]
    assert sorted(Path(p).relative_to(Path(p).parents[2]).as_posix() for p, _, _ in ds.gallery) == [
        f"P5/cam2/{pid:03d}_{n}.png" for pid in (1, 2, 3) for n in (1, 2)]


def test_cuhksysu_fixed_set_is_the_queries_against_their_persons_gallery_crops(tmp_path):
    """FedReID Sec. IV-A: the 2,900 queries, the gallery their persons' crops in their TestG100 gallery scenes
    (no distractor: person 4 in scenes 4 and 6, and person 2 in query 1's scene 5, are dropped)."""
    from privreid.data.formats.dg.cuhksysu import RELEASE, read_fixed_set

    query, gallery = read_fixed_set(RELEASE.find(make_cuhksysu(tmp_path)))
    assert [(Path(p).name, pid, cam) for p, pid, cam in query] == [
        ("p1_s1_1.jpg", 1, 0), ("p2_s2_1.jpg", 2, 0), ("p3_s3_1.jpg", 3, 0)]
    assert [(Path(p).name, pid, cam) for p, pid, cam in gallery] == [
        ("p1_s4_1.jpg", 1, 1), ("p2_s5_1.jpg", 2, 1), ("p3_s6_1.jpg", 3, 1)]


def test_fedpav_ilids_client_is_qmul_ilids(tmp_path):
    """FedPav's "iLIDS-VID" column (paper 004 Table 1: 59 + 60 identities, 248 + 228 = 476 images) is QMUL
    i-LIDS, as the reference's data_preprocess/data/ilids/meta.json holds it, not iLIDS-VID's 300 people."""
    from privreid.experiments.reproduce.fedpav import FEDPAV_CLIENTS

    assert {column: folder for column, _, folder in FEDPAV_CLIENTS}["iLIDS-VID"] == "ilids"
    pool = load_pool(make_ilids(tmp_path), "ilids")
    assert len(pool.views) == 119 and sum(len(a) for a, _ in pool.views.values()) == 476


def test_msmt17_train_variant_leaves_out_the_val_list(tmp_path):
    """FedReID (Table I) and SKA train on list_train.txt only (30,248 images), FedPav (Table 1) on train + val
    (32,621): `--format msmt17-train` / `msmt17-trainval` (the default, `msmt17`)."""
    from privreid.errors import ConfigError
    from test_formats import MSMT_LISTS, make_msmt

    make_msmt(tmp_path)
    val = {line.split()[0] for line in MSMT_LISTS["list_val.txt"]}
    both, default, train = (load_dataset(tmp_path, name) for name in ("msmt17-trainval", "msmt17", "msmt17-train"))
    assert len(both.train) == len(default.train) == 4 and default.name == "msmt17"
    assert {p for p, _, _ in both.train} - {p for p, _, _ in train.train} == {str(tmp_path / "train" / v)
                                                                             for v in val}
    assert len(train.train) == 3 and train.num_train_pids == 2 and train.name == "msmt17-train"
    assert train.query == both.query and train.gallery == both.gallery
    with pytest.raises(ConfigError, match="unknown msmt17 variant 'all'; choose one of: trainval, train"):
        load_dataset(tmp_path, "msmt17-all")


def llcm_tree(tmp_path, test_ids) -> Path:
    """An LLCM root under ``tmp_path``: one training image per modality, ``test_ids`` listed as test identities."""
    from test_vi_formats import image

    root = tmp_path / "LLCM"
    (root / "idx").mkdir(parents=True)
    for mod in ("vis", "nir"):
        rel = f"train_{mod}/cam1/0001/a.jpg"
        image(root / rel, grey=mod == "nir")
        (root / "idx" / f"train_{mod}.txt").write_text(f"{rel} 0\n")
    (root / "idx" / "test_id.txt").write_text(",".join(map(str, test_ids)) + "\n")
    return root


def test_llcm_queries_leave_out_nir_camera_3(tmp_path):
    """Joey623/L2RW CI/test.py ranks process_query_llcm(mode=2), the NIR cameras 1, 2, 4-9 (CI/data_manager.py),
    against every visible camera: a test person's test_nir/cam3 images are not queries."""
    from privreid.data.formats.vi.llcm import load_llcm
    from test_vi_formats import image

    root = llcm_tree(tmp_path, (3,))
    for cam in range(1, 10):
        for mod in ("vis", "nir"):
            image(root / f"test_{mod}" / f"cam{cam}" / "0003" / "a.jpg", grey=mod == "nir")
    ds = load_llcm(tmp_path)
    assert [cam + 1 for _, _, cam in ds.query] == [1, 2, 4, 5, 6, 7, 8, 9]
    assert [cam + 1 for _, _, cam in ds.gallery] == list(range(1, 10))


def test_llcm_test_lists_match_the_reference_code(tmp_path):
    """tests/reference/protocols/llcm_lists.json: Joey623/L2RW CI/data_manager.py's process_query_llcm(mode=2)
    and process_gallery_llcm(mode=1, trial=0, 1), run unchanged on this tree (tests/reference/README.md).
    Exact: the query images, their order, pids and cameras; each reference trial draws one visible image per
    (identity, camera) group, and privreid's gallery holds exactly those groups."""
    from privreid.data.formats.vi.llcm import load_llcm
    from test_vi_formats import image

    root = llcm_tree(tmp_path, (3, 4))
    for pid in (3, 4):  # the recording script's tree: 0, 1 or 2 images per identity, camera and modality
        for cam in range(1, 10):
            for mod in ("vis", "nir"):
                for k in range((pid + cam + (mod == "nir")) % 3):
                    image(root / f"test_{mod}" / f"cam{cam}" / f"{pid:04d}" / f"{mod}_{k}.jpg", grey=mod == "nir")
    reference = json.loads((Path(__file__).parent / "reference" / "protocols" / "llcm_lists.json").read_text())
    ds = load_llcm(tmp_path)
    assert [[Path(p).relative_to(root).as_posix(), pid, cam + 1] for p, pid, cam in ds.query] == reference["query"]
    groups = {(pid, cam + 1) for _, pid, cam in ds.gallery}
    gallery = {Path(p).relative_to(root).as_posix() for p, _, _ in ds.gallery}
    for trial in reference["gallery_trials"]:
        assert {(pid, cam) for _, pid, cam in trial} == groups and {p for p, _, _ in trial} <= gallery
