"""Visible-infrared loaders: each parses a fixture tree built here in the benchmark's published layout."""

import json
from pathlib import Path

import pytest
from PIL import Image

from privreid.data import INFRARED, VISIBLE, VIProtocol
from privreid.data.catalog import build_federation, resolve_datasets
from privreid.data.formats import detect_format, get_format, load_dataset, verify_images
from privreid.data.formats.vi import frame_dataset
from privreid.data.formats.vi.buptcampus import load_buptcampus
from privreid.data.formats.vi.hitsz_vcm import load_hitsz_vcm
from privreid.data.formats.vi.llcm import load_llcm
from privreid.data.formats.vi.regdb import load_regdb
from privreid.data.formats.vi.sysu_mm01 import load_sysu_mm01
from privreid.data.formats.vi.vi_folders import load_vi_folders
from privreid.errors import ConfigError, DataError


def image(path: Path, grey: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L" if grey else "RGB", (4, 8), 128).save(path)


def modalities(ds, samples):
    return {ds.modality[path] for path, _, _ in samples}


# --------------------------------------------------------------------------- SYSU-MM01


def write_sysu(root: Path, train=(1, 2), val=(3,), test=(4, 5), missing=((5, 3), (5, 4)), write=image) -> Path:
    """A SYSU-MM01 tree under ``root``: two images per (identity, camera) except the ``missing`` pairs.

    ``write(path, grey)`` writes one image (infrared cameras 3 and 6 are grey).
    """
    base = root / "SYSU-MM01"
    (base / "exp").mkdir(parents=True, exist_ok=True)
    for name, ids in (("train_id", train), ("val_id", val), ("test_id", test)):
        (base / "exp" / f"{name}.txt").write_text(",".join(map(str, ids)) + "\n")
    for pid in (*train, *val, *test):
        for cam in range(1, 7):
            if (pid, cam) in missing:  # identity missing from a camera
                continue
            for n in (1, 2):
                write(base / f"cam{cam}" / f"{pid:04d}" / f"{n:04d}.jpg", grey=cam in (3, 6))
    return root


@pytest.fixture
def sysu(tmp_path):
    return write_sysu(tmp_path / "sysu")


def test_sysu_all_search(sysu):
    ds = load_sysu_mm01(sysu)
    assert ds.name == "sysu-mm01" and Path(ds.root).name == "SYSU-MM01"
    assert ds.vi_protocol == VIProtocol(gallery_trials=10, cmc_by_identity=True, colocated_cameras=((1, 2),))
    assert sorted({pid for _, pid, _ in ds.train}) == [0, 1, 2]  # train + val identities, relabelled
    assert len(ds.train) == 3 * 6 * 2 and {cam for _, _, cam in ds.train} == set(range(6))
    assert {(pid, cam) for _, pid, cam in ds.query} == {(4, 2), (4, 5), (5, 5)}
    assert modalities(ds, ds.query) == {INFRARED} and len(ds.query) == 6
    assert {cam for _, _, cam in ds.gallery} == {0, 1, 3, 4} and modalities(ds, ds.gallery) == {VISIBLE}
    assert {pid for _, pid, _ in ds.gallery} == {4, 5} and len(ds.gallery) == 2 * 4 * 2 - 2
    by_cam = {cam: ds.modality[path] for path, _, cam in ds.train}
    assert by_cam == {0: VISIBLE, 1: VISIBLE, 2: INFRARED, 3: VISIBLE, 4: VISIBLE, 5: INFRARED}


def test_sysu_indoor_and_detection(sysu):
    ds = load_dataset(sysu, "sysu-mm01-indoor")
    assert ds.name == "sysu-mm01-indoor" and {cam for _, _, cam in ds.gallery} == {0, 1}
    assert len(ds.query) == 6
    assert detect_format(sysu) == "sysu-mm01" and get_format("sysu-mm01-indoor")[0].family == "vi"
    auto = load_dataset(sysu, "auto")
    assert auto.name == "sysu-mm01" and auto.query == load_sysu_mm01(sysu).query
    assert list(resolve_datasets([str(sysu)])) == ["sysu"]
    with pytest.raises(ConfigError, match="mode"):
        load_sysu_mm01(sysu, "outdoor")


def test_sysu_errors(sysu):
    (sysu / "SYSU-MM01" / "exp" / "test_id.txt").write_text("4,x\n")
    with pytest.raises(DataError, match="test_id.txt.*'x'"):
        load_sysu_mm01(sysu)
    (sysu / "SYSU-MM01" / "exp" / "test_id.txt").unlink()
    with pytest.raises(DataError, match="missing list file .*test_id.txt"):
        load_sysu_mm01(sysu)


# --------------------------------------------------------------------------- RegDB


def write_regdb(root: Path, trial: int, train_pids, test_pids) -> None:
    for split, pids in (("train", train_pids), ("test", test_pids)):
        for kind, folder, tag in (("visible", "Visible", "v"), ("thermal", "Thermal", "t")):
            lines = []
            for label, pid in enumerate(pids):
                for n in (1, 2):
                    rel = f"{folder}/{pid}/male_front_{tag}_{pid:05d}_{n}.bmp"
                    image(root / rel, grey=kind == "thermal")
                    lines.append(f"{rel} {label}")
            (root / "idx").mkdir(parents=True, exist_ok=True)
            (root / "idx" / f"{split}_{kind}_{trial}.txt").write_text("\n".join(lines) + "\n")


def test_regdb_trials(tmp_path):
    root = tmp_path / "RegDB"
    write_regdb(root, 1, [1, 2, 3], [4, 5])
    write_regdb(root, 2, [4, 5, 6], [1, 2])
    ds = load_regdb(tmp_path)
    assert ds.name == "regdb" and ds.vi_protocol == VIProtocol()
    assert len(ds.train) == 12 and sorted({pid for _, pid, _ in ds.train}) == [0, 1, 2]
    assert modalities(ds, ds.query) == {INFRARED} and {cam for _, _, cam in ds.query} == {1}
    assert modalities(ds, ds.gallery) == {VISIBLE} and {cam for _, _, cam in ds.gallery} == {0}
    assert all("/Thermal/" in path for path, _, _ in ds.query) and all(Path(p).is_file() for p, _, _ in ds.query)
    assert [pid for _, pid, _ in ds.query] == [0, 0, 1, 1]  # the list's label column
    second = load_dataset(tmp_path, "regdb-2")
    assert second.name == "regdb-2" and all("/Thermal/1/" in p or "/Thermal/2/" in p for p, _, _ in second.query)
    assert detect_format(tmp_path) == "regdb"
    with pytest.raises(ConfigError, match="1..10"):
        load_regdb(tmp_path, 11)
    with pytest.raises(DataError, match="missing list file .*train_visible_3.txt"):
        load_regdb(tmp_path, 3)
    (root / "idx" / "train_visible_1.txt").write_text("Visible/1/a.bmp 0\nVisible/1/b.bmp\n")
    with pytest.raises(DataError, match=r"train_visible_1.txt:2: expected '<relpath> <label>'"):
        load_regdb(tmp_path)


# --------------------------------------------------------------------------- LLCM


def test_llcm(tmp_path):
    root = tmp_path / "LLCM"
    train = {"vis": [("cam1", 1, 0), ("cam2", 2, 1)], "nir": [("cam1", 1, 0), ("cam3", 2, 1)]}
    for mod, rows in train.items():
        lines = []
        for cam, pid, label in rows:
            rel = f"train_{mod}/{cam}/{pid:04d}/{cam}_{pid:04d}_x.jpg"
            image(root / rel, grey=mod == "nir")
            lines.append(f"{rel} {label}")
        (root / "idx").mkdir(parents=True, exist_ok=True)
        (root / "idx" / f"train_{mod}.txt").write_text("\n".join(lines) + "\n")
    (root / "idx" / "test_id.txt").write_text("3,4\n")
    for mod, cam, pid in (("vis", 1, 3), ("vis", 2, 3), ("vis", 2, 4), ("nir", 1, 3), ("nir", 2, 4), ("nir", 4, 9)):
        image(root / f"test_{mod}" / f"cam{cam}" / f"{pid:04d}" / "a.jpg", grey=mod == "nir")
    ds = load_llcm(tmp_path)
    assert ds.name == "llcm" and ds.vi_protocol == VIProtocol(gallery_trials=10, cmc_by_identity=True)
    assert sorted((cam, pid) for _, pid, cam in ds.train) == [(0, 0), (0, 0), (1, 1), (2, 1)]
    assert modalities(ds, ds.train) == {VISIBLE, INFRARED}
    # cameras record both modalities: camera 1 is camid 0 for both; pid 9 is not a test identity
    assert sorted((pid, cam) for _, pid, cam in ds.query) == [(3, 0), (4, 1)]
    assert sorted((pid, cam) for _, pid, cam in ds.gallery) == [(3, 0), (3, 1), (4, 1)]
    assert modalities(ds, ds.query) == {INFRARED} and modalities(ds, ds.gallery) == {VISIBLE}
    assert detect_format(tmp_path) == "llcm"
    (root / "idx" / "train_vis.txt").write_text("train_vis/0001/a.jpg 0\n")
    with pytest.raises(DataError, match="cam<k>"):
        load_llcm(tmp_path)


# --------------------------------------------------------------------------- HITSZ-VCM (video)


def write_vcm(root: Path) -> None:
    """Train: 3 tracklets of 12 frames + one of 5 (too short); test: rows 1, 3, 5 are listed as queries."""
    counters: dict = {}

    def tracklets(split, folder, rows):
        names, info = [], []
        for t, (m, pid, cam, length) in enumerate(rows, start=1):
            start = len(names) + 1
            for _ in range(length):
                key = (pid, m, cam)
                counters[key] = counters.get(key, 0) + 1
                frame = f"{counters[key]:03d}.jpg"
                names.append(f"{pid:04d}M{m}D{cam}T{t:04d}F{frame}")
                image(root / folder / f"{pid:04d}" / ("ir" if m == 1 else "rgb") / f"D{cam}" / frame, grey=m == 1)
            info.append(f"{m} {start} {len(names)} {pid} {cam}")
        (root / "info").mkdir(parents=True, exist_ok=True)
        (root / "info" / f"{split}_name.txt").write_text("\n".join(names) + "\n")
        (root / "info" / f"track_{split}_info.txt").write_text("\n".join(info) + "\n")

    tracklets("train", "Train", [(1, 1, 2, 12), (2, 1, 1, 12), (2, 2, 3, 12), (1, 2, 4, 5)])
    tracklets("test", "Test", [(1, 3, 1, 12), (2, 3, 2, 12), (1, 4, 1, 12), (2, 4, 3, 12), (2, 3, 5, 12)])
    (root / "info" / "query_IDX.txt").write_text("1 3 5\n")


def test_hitsz_vcm(tmp_path):
    root = tmp_path / "vcm"
    write_vcm(root)
    ds = load_hitsz_vcm(root)
    assert ds.name == "hitsz-vcm" and ds.tracklets is not None
    assert len(ds.train) == 3  # the 5-frame tracklet is shorter than min_seq_len=12
    assert sorted((pid, cam) for _, pid, cam in ds.train) == [(0, 0), (0, 1), (1, 2)]
    assert modalities(ds, ds.train) == {VISIBLE, INFRARED}
    # query: the listed rows that are infrared (row 5 is visible); gallery: the unlisted visible rows
    assert sorted((pid, cam) for _, pid, cam in ds.query) == [(3, 0), (4, 0)]
    assert sorted((pid, cam) for _, pid, cam in ds.gallery) == [(3, 1), (4, 2)]
    assert modalities(ds, ds.query) == {INFRARED} and modalities(ds, ds.gallery) == {VISIBLE}
    key = ds.query[0][0]
    frames = ds.tracklets[key]
    assert len(frames) == 12 and frames[0].endswith("Test/0003/ir/D1/001.jpg")
    assert frames == sorted(frames) and key.endswith("Test/0003/ir/D1/tracklet00001")
    assert len(load_hitsz_vcm(root, min_seq_len=1).train) == 4
    expanded = frame_dataset(ds)
    assert len(expanded.train) == 36 and len(expanded.query) == 24
    verify_images(expanded)
    assert detect_format(root) == "hitsz-vcm"
    (root / "info" / "track_test_info.txt").write_text("3 1 12 3 1\n")
    with pytest.raises(DataError, match="track_test_info.txt:1"):
        load_hitsz_vcm(root)


# --------------------------------------------------------------------------- BUPTCampus (video)


def write_bupt(root: Path) -> None:
    paths: dict = {}
    for pid, mod, cam, tid in [(1, "IR", "LS3", "1"), (1, "RGB", "LS3", "1"), (2, "RGB", "G25", "1"),
                               (2, "IR", "CQ1", "2"), (3, "IR", "W4", "1"), (3, "RGB", "W4", "2"),
                               (3, "RGB", "TSG1", "1"), (3, "IR", "TSG2", "1"), (4, "IR", "LS3", "1"),
                               (4, "RGB", "LS3", "1"), (4, "IR", "G25", "7")]:
        rels = [f"{pid}/{mod}/{cam}/{pid}_{mod}_{cam}_{tid}_{n}.jpg" for n in range(3)]
        for rel in rels:
            image(root / "DATA" / rel, grey=mod == "IR")
        paths.setdefault(str(pid), {}).setdefault(mod, {}).setdefault(cam, {})[tid] = rels
    (root / "data_paths.json").write_text(json.dumps(paths))
    (root / "train.txt").write_text("1 RGB/IR LS3 1\n2 RGB G25 1\n2 IR CQ1 2\n")
    (root / "query.txt").write_text("3 IR W4 1\n3 RGB W4 2\n4 IR G25 7\n")
    (root / "gallery.txt").write_text("3 RGB TSG1 1\n3 IR TSG2 1\n4 RGB/IR LS3 1\n")
    (root / "train_auxiliary.txt").write_text("9 RGB/IR LS3 1\n")


def test_buptcampus(tmp_path):
    root = tmp_path / "BUPTCampus"
    write_bupt(root)
    ds = load_buptcampus(tmp_path)
    assert ds.name == "buptcampus" and len(ds.train) == 4  # the paired line is two tracklets
    assert sorted((pid, cam) for _, pid, cam in ds.train) == [(0, 0), (0, 0), (1, 1), (1, 2)]
    assert sorted((pid, cam) for _, pid, cam in ds.query) == [(3, 3), (4, 1)]
    assert sorted((pid, cam) for _, pid, cam in ds.gallery) == [(3, 4), (4, 0)]
    assert modalities(ds, ds.query) == {INFRARED} and modalities(ds, ds.gallery) == {VISIBLE}
    key = ds.query[0][0]
    assert key == str(root / "DATA" / "3" / "IR" / "W4" / "1")
    assert [Path(f).name for f in ds.tracklets[key]] == [f"3_IR_W4_1_{n}.jpg" for n in range(3)]
    verify_images(frame_dataset(ds))
    assert detect_format(tmp_path) == "buptcampus"
    (root / "train.txt").write_text("1 RGB XX9 1\n")
    with pytest.raises(DataError, match="train.txt:1: .*camera"):
        load_buptcampus(tmp_path)
    (root / "train.txt").write_text("1 RGB LS3 5\n")
    with pytest.raises(DataError, match="1/RGB/LS3/5 is not in"):
        load_buptcampus(tmp_path)


# --------------------------------------------------------------------------- vi-folders, catalog, errors


def test_vi_folders_errors_and_unknown_formats(tmp_path):
    root = tmp_path / "vf"
    image(root / "train" / "visible" / "c1" / "0001" / "a.jpg")
    image(root / "train" / "infrared" / "c2" / "0001" / "t0" / "f0.jpg", grey=True)
    image(root / "test" / "visible" / "c1" / "0002" / "a.jpg")
    image(root / "test" / "infrared" / "c2" / "0002" / "a.jpg", grey=True)
    assert detect_format(root) == "vi-folders"
    with pytest.raises(DataError, match="mixes image files and tracklet folders"):
        load_vi_folders(root)
    (root / "train" / "infrared" / "c2" / "0001" / "t0" / "f0.jpg").rename(
        root / "train" / "infrared" / "c2" / "0001" / "b.jpg")
    (root / "train" / "infrared" / "c2" / "0001" / "t0").rmdir()
    ds = load_vi_folders(root)
    assert ds.tracklets is None and modalities(ds, ds.train) == {VISIBLE, INFRARED}
    (root / "test" / "visible" / "cam1").mkdir()
    with pytest.raises(DataError, match="c<camera number>"):
        load_vi_folders(root)
    with pytest.raises(ConfigError, match="unknown dataset format 'sysu'.*regdb-<trial>"):
        load_dataset(root, "sysu")
    with pytest.raises(ConfigError, match="unknown dataset format 'regdb-x'"):
        load_dataset(root, "regdb-x")
    with pytest.raises(DataError):
        detect_format(tmp_path / "nothing")
    assert get_format("market1501")[0].family != "vi"


def test_video_federation_is_verified_frame_by_frame(tmp_path):
    root = tmp_path / "vcm"
    write_vcm(root)
    fed = build_federation([str(root)], verify=True)
    assert [c.name for c in fed.clients] == ["vcm"] and fed.clients[0].tracklets is not None
    (root / "Test" / "0003" / "ir" / "D1" / "005.jpg").write_bytes(b"not a jpeg")  # a query frame
    with pytest.raises(DataError, match="corrupt image .*Test"):
        build_federation([str(root)], verify=True)
