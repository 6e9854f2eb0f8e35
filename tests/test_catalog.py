import pytest
from PIL import Image

from privreid.data.catalog import build_federation, resolve_datasets
from privreid.errors import ConfigError, DataError


def write_split(root, split, names, ext="jpg"):
    (root / split).mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.new("RGB", (8, 16), (10, 20, 30)).save(root / split / f"{name}.{ext}")


def market(root, pids=(1, 2)):
    for split in ("bounding_box_train", "query", "bounding_box_test"):
        write_split(root, split, [f"{p:04d}_c{c}s1_000001_00" for p in pids for c in (1, 2)])
    return root


def test_synthetic_root_gives_one_dataset_per_domain(tiny_synth):
    ds = resolve_datasets([str(tiny_synth)])
    assert list(ds) == ["synthA", "synthB", "synthC"]
    assert all(d.num_train_pids == 6 for d in ds.values())


def test_dataset_root_and_folder_of_datasets(tmp_path):
    market(tmp_path / "sets" / "siteA")
    market(tmp_path / "sets" / "siteB", pids=(3, 4, 5))
    single = resolve_datasets([str(tmp_path / "sets" / "siteA")])
    assert list(single) == ["siteA"]
    both = resolve_datasets([str(tmp_path / "sets")])
    assert list(both) == ["siteA", "siteB"] and both["siteB"].num_train_pids == 3
    with pytest.raises(ConfigError, match="two datasets are named 'siteA'"):
        resolve_datasets([str(tmp_path / "sets" / "siteA"), str(tmp_path / "sets")])


def test_cuhk03np_variant_format(tmp_path):
    root = tmp_path / "cuhk"
    for variant, pids in (("detected", (1, 2)), ("labeled", (1, 2, 3))):
        for split in ("bounding_box_train", "query", "bounding_box_test"):
            write_split(root / variant, split, [f"{p:04d}_c{c}_1" for p in pids for c in (1, 2)], ext="png")
    assert resolve_datasets([str(root)], "cuhk03np-labeled")["cuhk"].num_train_pids == 3
    assert resolve_datasets([str(root)], "cuhk03np-detected")["cuhk"].num_train_pids == 2


def test_missing_and_non_directory(tmp_path):
    with pytest.raises(DataError, match="not found"):
        resolve_datasets([str(tmp_path / "nope")])
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="not a directory"):
        resolve_datasets([str(tmp_path / "file")])


def test_verify_catches_corrupt_image_before_training(tmp_path):
    root = market(tmp_path / "m", pids=(1, 2, 3))
    (root / "query" / "0001_c1s1_000009_00.jpg").write_bytes(b"broken")
    build_federation([str(root)])  # lazy: not read yet
    with pytest.raises(DataError, match="0001_c1s1_000009_00.jpg"):
        build_federation([str(root)], verify=True)


def test_synth_default_holds_out_last_domain(tiny_synth, monkeypatch):
    import privreid.data.synthetic as synthetic

    monkeypatch.setattr(synthetic, "ensure_synthetic", lambda cache_root=None, config=None: tiny_synth)
    fed = build_federation(None)
    assert [c.name for c in fed.clients] == ["synthA", "synthB"]
    assert [t.name for t in fed.unseen] == ["synthC"]
