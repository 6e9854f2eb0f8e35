"""Loaders for the real dataset layouts, on tiny fixture trees that follow the real naming conventions."""

import io
from pathlib import Path

import pytest
from PIL import Image

from privreid.data import DATASET_FORMATS, dataset_stats, detect_format, format_stats_table, load_dataset, verify_images
from privreid.errors import ConfigError, DataError


def _image_bytes(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 16), (120, 60, 30)).save(buf, fmt)
    return buf.getvalue()


JPEG = _image_bytes("JPEG")
PNG = _image_bytes("PNG")


def write_images(folder: Path, names, data: bytes = JPEG) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(data)


MARKET = {
    "bounding_box_train": [
        "0002_c1s1_000451_03.jpg",
        "0002_c2s1_000551_01.jpg",
        "0007_c3s3_015101_02.jpg",
        "0007_c1s2_000076_01.jpg",
        "0010_c6s1_010201_01.jpg",
        "-1_c1s1_000401_03.jpg",  # junk
    ],
    "query": ["0002_c5s1_000126_00.jpg", "0007_c4s1_009901_00.jpg"],
    "bounding_box_test": [
        "0000_c1s1_000031_02.jpg",  # distractor
        "0000_c3s1_000051_01.jpg",  # distractor
        "-1_c5s1_000401_01.jpg",  # junk
        "0002_c6s1_000201_04.jpg",
        "0007_c2s1_002001_01.jpg",
    ],
}

DUKE = {
    "bounding_box_train": ["0001_c2_f0046182.jpg", "0001_c5_f0051341.jpg", "0003_c8_f0000002.jpg"],
    "query": ["0005_c2_f0046985.jpg"],
    "bounding_box_test": ["0005_c7_f0000123.jpg", "0006_c1_f0001234.jpg"],
}

CUHK = {
    "detected": {
        "bounding_box_train": ["0001_c1_1.png", "0001_c2_6.png", "0004_c1_2.png"],
        "query": ["0010_c1_1.png"],
        "bounding_box_test": ["0010_c2_7.png", "0011_c2_6.png"],
    },
    "labeled": {
        "bounding_box_train": ["0001_c1_1.png", "0002_c2_6.png", "0003_c1_2.png", "0003_c2_9.png"],
        "query": ["0010_c2_1.png"],
        "bounding_box_test": ["0010_c1_7.png"],
    },
}

MSMT_LISTS = {
    "list_train.txt": [
        "0000/0000_000_01_0303morning_0015_0.jpg 0",
        "0000/0000_001_05_0303morning_0016_1.jpg 0",
        "0005/0005_000_15_0303noon_0100_0.jpg 5",
    ],
    "list_val.txt": ["0001/0001_000_03_0303afternoon_0020_0.jpg 1"],
    "list_query.txt": ["0000/0000_000_02_0113morning_0001_0.jpg 0"],
    "list_gallery.txt": [
        "0000/0000_003_09_0113noon_0101_2.jpg 0",
        "0007/0007_000_11_0113noon_0200_0.jpg 7",
    ],
}


def make_market(root: Path, layout=MARKET) -> Path:
    for folder, names in layout.items():
        write_images(root / folder, names)
    return root


def make_cuhk(root: Path) -> Path:
    for variant, layout in CUHK.items():
        for folder, names in layout.items():
            write_images(root / variant / folder, names, PNG)
    return root


def make_msmt(root: Path, train_dir="train", test_dir="test") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for list_name, lines in MSMT_LISTS.items():
        (root / list_name).write_text("\n".join(lines) + "\n")
        image_dir = root / (test_dir if list_name in ("list_query.txt", "list_gallery.txt") else train_dir)
        for line in lines:
            relpath = Path(line.split()[0])
            write_images(image_dir / relpath.parent, [relpath.name])
    return root


def test_market1501(tmp_path):
    make_market(tmp_path)
    (tmp_path / "bounding_box_test" / "Thumbs.db").write_bytes(b"not an image")
    ds = load_dataset(tmp_path)
    assert ds.name == "market1501" and ds.root == str(tmp_path)
    train = {(Path(p).name, pid, cam) for p, pid, cam in ds.train}
    assert train == {  # junk dropped, pids 2/7/10 -> 0/1/2, cameras 0-based
        ("0002_c1s1_000451_03.jpg", 0, 0),
        ("0002_c2s1_000551_01.jpg", 0, 1),
        ("0007_c3s3_015101_02.jpg", 1, 2),
        ("0007_c1s2_000076_01.jpg", 1, 0),
        ("0010_c6s1_010201_01.jpg", 2, 5),
    }
    assert sorted((pid, cam) for _, pid, cam in ds.query) == [(2, 4), (7, 3)]
    assert sorted((pid, cam) for _, pid, cam in ds.gallery) == [(0, 0), (0, 2), (2, 5), (7, 1)]
    assert all(Path(p).is_file() for p, _, _ in ds.train + ds.query + ds.gallery)
    assert (ds.num_train_pids, ds.num_train_cams) == (3, 4)


def test_market1501_nested_release_folder(tmp_path):
    make_market(tmp_path / "Market-1501-v15.09.15")
    assert detect_format(tmp_path) == "market1501"
    ds = load_dataset(tmp_path, "market1501")
    assert ds.root == str(tmp_path / "Market-1501-v15.09.15")
    assert (len(ds.train), len(ds.query), len(ds.gallery)) == (5, 2, 4)


def test_dukemtmcreid_detected_by_file_names(tmp_path):
    make_market(tmp_path, DUKE)
    ds = load_dataset(tmp_path)
    assert ds.name == "dukemtmcreid"
    assert sorted((pid, cam) for _, pid, cam in ds.train) == [(0, 1), (0, 4), (1, 7)]
    assert [(pid, cam) for _, pid, cam in ds.query] == [(5, 1)]
    assert sorted((pid, cam) for _, pid, cam in ds.gallery) == [(5, 6), (6, 0)]
    with pytest.raises(DataError, match="looks like a dukemtmcreid dataset, not market1501"):
        load_dataset(tmp_path, "market1501")  # a --format the tree does not follow is refused


def test_dukemtmcreid_nested_release_folder(tmp_path):
    make_market(tmp_path / "DukeMTMC-reID", DUKE)
    assert detect_format(tmp_path) == "dukemtmcreid"
    ds = load_dataset(tmp_path, "dukemtmcreid")
    assert ds.root == str(tmp_path / "DukeMTMC-reID")
    assert (ds.num_train_pids, len(ds.query), len(ds.gallery)) == (2, 1, 2)


@pytest.mark.parametrize("nested", [False, True])
def test_cuhk03np(tmp_path, nested):
    make_cuhk(tmp_path / "cuhk03-np" if nested else tmp_path)
    assert detect_format(tmp_path) == "cuhk03np"
    detected = load_dataset(tmp_path)
    assert detected.name == "cuhk03np-detected"
    assert detected.root.endswith("detected")
    assert sorted((pid, cam) for _, pid, cam in detected.train) == [(0, 0), (0, 1), (1, 0)]
    assert [(pid, cam) for _, pid, cam in detected.query] == [(10, 0)]
    labeled = load_dataset(tmp_path, "cuhk03np", variant="labeled")
    assert labeled.name == "cuhk03np-labeled"
    assert sorted((pid, cam) for _, pid, cam in labeled.train) == [(0, 0), (1, 1), (2, 0), (2, 1)]
    assert [(pid, cam) for _, pid, cam in labeled.gallery] == [(10, 0)]


def _check_msmt(ds, root: Path, train_dir: str, test_dir: str) -> None:
    assert ds.name == "msmt17" and ds.root == str(root)
    # list_train + list_val; pids 0/1/5 -> 0/1/2; camera = 3rd field of the name, 1-based.
    assert sorted((pid, cam) for _, pid, cam in ds.train) == [(0, 0), (0, 4), (1, 2), (2, 14)]
    assert ds.train[0][0] == str(root / train_dir / "0000" / "0000_000_01_0303morning_0015_0.jpg")
    assert [(pid, cam) for _, pid, cam in ds.query] == [(0, 1)]
    assert [(pid, cam) for _, pid, cam in ds.gallery] == [(0, 8), (7, 10)]
    assert all(p.startswith(str(root / test_dir)) for p, _, _ in ds.query + ds.gallery)
    assert all(Path(p).is_file() for p, _, _ in ds.train + ds.query + ds.gallery)


def test_msmt17_v1_flat(tmp_path):
    make_msmt(tmp_path)
    assert detect_format(tmp_path) == "msmt17"
    _check_msmt(load_dataset(tmp_path), tmp_path, "train", "test")


def test_msmt17_v1_subdir(tmp_path):
    make_msmt(tmp_path / "MSMT17_V1")
    _check_msmt(load_dataset(tmp_path, "msmt17"), tmp_path / "MSMT17_V1", "train", "test")


def test_msmt17_v2_subdir(tmp_path):
    make_msmt(tmp_path / "MSMT17_V2", "mask_train_v2", "mask_test_v2")
    assert detect_format(tmp_path) == "msmt17"
    _check_msmt(load_dataset(tmp_path), tmp_path / "MSMT17_V2", "mask_train_v2", "mask_test_v2")


def test_msmt17_prefers_v1_like_torchreid(tmp_path):
    make_msmt(tmp_path / "MSMT17_V1")
    make_msmt(tmp_path / "MSMT17_V2", "mask_train_v2", "mask_test_v2")
    assert load_dataset(tmp_path).root == str(tmp_path / "MSMT17_V1")


def test_dataset_stats_and_table(tmp_path):
    ds = load_dataset(make_market(tmp_path))
    assert dataset_stats(ds) == {
        "train": {"identities": 3, "images": 5, "cameras": 4},
        "query": {"identities": 2, "images": 2, "cameras": 2},
        "gallery": {"identities": 3, "images": 4, "cameras": 4},  # distractor pid 0 counts as one identity
    }
    assert format_stats_table(ds).splitlines() == [
        "dataset     split    #ids  #images  #cams",
        "----------  -------  ----  -------  -----",
        "market1501  train       3        5      4",
        "            query       2        2      2",
        "            gallery     3        4      4",
    ]
    assert len(format_stats_table([ds, ds]).splitlines()) == 2 + 6


def test_dataset_formats_describe_every_format():
    assert set(DATASET_FORMATS) == {"market1501", "dukemtmcreid", "cuhk03np", "msmt17"}
    assert all(isinstance(text, str) and "root/" in text for text in DATASET_FORMATS.values())


# ----------------------------------------------------------------------------- errors


def test_missing_root(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_dataset(tmp_path / "nope")


def test_root_is_a_file(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(DataError, match="not a directory"):
        load_dataset(tmp_path / "f.txt", "market1501")


def test_empty_root(tmp_path):
    with pytest.raises(DataError, match="is empty"):
        load_dataset(tmp_path)


def test_unknown_layout_lists_expected_layouts(tmp_path):
    (tmp_path / "images").mkdir()
    with pytest.raises(DataError, match="cannot recognise") as err:
        load_dataset(tmp_path)
    assert all(name in str(err.value) for name in DATASET_FORMATS)


def test_folder_of_several_datasets_is_not_one_dataset(tmp_path):
    make_market(tmp_path / "Market-1501-v15.09.15")
    make_market(tmp_path / "DukeMTMC-reID", DUKE)
    with pytest.raises(DataError, match="holds several datasets \\(dukemtmcreid, market1501\\)"):
        load_dataset(tmp_path)
    assert load_dataset(tmp_path, "dukemtmcreid").root == str(tmp_path / "DukeMTMC-reID")


def test_unknown_name_and_bad_variants(tmp_path):
    make_market(tmp_path)
    with pytest.raises(ConfigError, match="unknown dataset format 'mars'"):
        load_dataset(tmp_path, "mars")
    with pytest.raises(ConfigError, match="only applies to cuhk03np"):
        load_dataset(tmp_path, "market1501", variant="labeled")
    with pytest.raises(ConfigError, match="only applies to cuhk03np"):
        load_dataset(tmp_path, variant="labeled")  # auto-detected market1501
    with pytest.raises(ConfigError, match="unknown cuhk03np variant"):
        load_dataset(make_cuhk(tmp_path / "cuhk"), "cuhk03np", variant="manual")


def test_missing_split_folder(tmp_path):
    make_market(tmp_path, {k: v for k, v in MARKET.items() if k != "query"})
    with pytest.raises(DataError, match="missing split folder .*query"):
        load_dataset(tmp_path)


def test_missing_cuhk03np_variant_folder(tmp_path):
    make_cuhk(tmp_path)
    for path in (tmp_path / "labeled").rglob("*.png"):
        path.unlink()
    for folder in ("bounding_box_train", "query", "bounding_box_test"):
        (tmp_path / "labeled" / folder).rmdir()
    (tmp_path / "labeled").rmdir()
    with pytest.raises(DataError, match="missing split folder .*labeled"):
        load_dataset(tmp_path, "cuhk03np", variant="labeled")


def test_split_with_only_junk_has_no_identities(tmp_path):
    make_market(tmp_path, {**MARKET, "bounding_box_train": ["-1_c1s1_000401_03.jpg"]})
    with pytest.raises(DataError, match="train split has no identities"):
        load_dataset(tmp_path)


def test_bad_file_name_is_named(tmp_path):
    make_market(tmp_path, {**MARKET, "query": ["0002_c5s1_000126_00.jpg", "person_7.jpg"]})
    with pytest.raises(DataError, match="person_7.jpg"):
        load_dataset(tmp_path)


def test_camera_zero_is_rejected(tmp_path):
    make_market(tmp_path, {**MARKET, "query": ["0002_c0s1_000126_00.jpg"]})
    with pytest.raises(DataError, match="0002_c0s1_000126_00.jpg: camera 0 is invalid"):
        load_dataset(tmp_path)


def test_msmt17_malformed_list_line(tmp_path):
    make_msmt(tmp_path)
    with open(tmp_path / "list_query.txt", "a") as f:
        f.write("0003/0003_000_xx_0113morning_0001_0.jpg 3\n")
    with pytest.raises(DataError, match=r"list_query.txt:2: .*0003_000_xx"):
        load_dataset(tmp_path)


def test_msmt17_camera_zero_and_bad_pid(tmp_path):
    make_msmt(tmp_path)
    (tmp_path / "list_val.txt").write_text("0001/0001_000_00_0303afternoon_0020_0.jpg 1\n")
    with pytest.raises(DataError, match="0001_000_00_0303afternoon_0020_0.jpg: camera 0 is invalid"):
        load_dataset(tmp_path)
    (tmp_path / "list_val.txt").write_text("0001/0001_000_03_0303afternoon_0020_0.jpg -4\n")
    with pytest.raises(DataError, match="pid -4 is invalid"):
        load_dataset(tmp_path)


def test_msmt17_missing_list_file(tmp_path):
    make_msmt(tmp_path)
    (tmp_path / "list_gallery.txt").unlink()
    with pytest.raises(DataError, match="missing list file .*list_gallery.txt"):
        load_dataset(tmp_path)


def test_msmt17_missing_image_folders(tmp_path):
    make_msmt(tmp_path / "MSMT17_V2", "mask_train_v2", "mask_test_v2")
    (tmp_path / "MSMT17_V2" / "mask_train_v2").rename(tmp_path / "elsewhere")
    with pytest.raises(DataError, match="neither train/ .* nor mask_train_v2/"):
        load_dataset(tmp_path)
    (tmp_path / "elsewhere").rename(tmp_path / "MSMT17_V2" / "mask_train_v2")
    (tmp_path / "MSMT17_V2" / "mask_test_v2").rename(tmp_path / "elsewhere")
    with pytest.raises(DataError, match="missing split folder .*mask_test_v2"):
        load_dataset(tmp_path)


def test_verify_images(tmp_path):
    ds = load_dataset(make_market(tmp_path))
    verify_images(ds)
    verify_images(ds, full_decode=True)
    truncated = tmp_path / "bounding_box_test" / "0007_c2s1_002001_01.jpg"
    truncated.write_bytes(JPEG[:-3])  # scan data cut short, headers intact
    with pytest.raises(DataError, match="0007_c2s1_002001_01.jpg: the JPEG is cut short .*1 of"):
        verify_images(ds)  # found without decoding
    with pytest.raises(DataError, match="0007_c2s1_002001_01.jpg"):
        verify_images(ds, full_decode=True)
    garbage = tmp_path / "query" / "0002_c5s1_000126_00.jpg"
    garbage.write_bytes(b"\xff\xd8 definitely not a JPEG")
    with pytest.raises(DataError, match="corrupt image .*0002_c5s1_000126_00.jpg"):
        verify_images(ds)


def test_api_dataset_info_and_formats(tmp_path):
    from privreid.api import dataset_formats, dataset_info
    from privreid.data.formats import available_formats

    root = tmp_path / "Market-1501"
    make_market(root)
    [info] = dataset_info([str(root)])
    assert info["name"] == "Market-1501" and info["format"] == "market1501"
    assert dataset_stats(info["dataset"]) == dataset_stats(load_dataset(root, "market1501"))
    listed = dataset_formats()
    assert [f["spellings"] for f in listed] == [f.spellings for f in available_formats().values()]
    assert all(f["origin"] == "built-in" for f in listed)
