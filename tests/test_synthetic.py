"""The synthetic multi-domain generator: layout, naming, splits, determinism, atomicity, signal."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import privreid.data.synthetic as synthetic
from privreid.data import load_dataset
from privreid.data.synthetic import SynthConfig, ensure_synthetic, generate_synthetic, identity_appearance
from privreid.errors import ConfigError, DataError

SMALL = SynthConfig(num_domains=2, ids_per_domain=6, test_ids_per_domain=4, cams_per_domain=3,
                    images_per_id_per_cam=2, height=32, width=16, distractors=3, junk=2)
NAME = re.compile(r"^([-\d]+)_c(\d)s1_(\d{6})_(\d{2})\.jpg$")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return generate_synthetic(tmp_path_factory.mktemp("g") / "out", SMALL)


def files(root, domain, split):
    return sorted((root / domain / split).iterdir())


def test_layout_naming_and_counts(small):
    manifest = json.loads((small / "manifest.json").read_text())
    assert manifest["domains"] == ["synthA", "synthB"]
    for domain in manifest["domains"]:
        for split in ("bounding_box_train", "query", "bounding_box_test"):
            names = [p.name for p in files(small, domain, split)]
            assert names and all(NAME.match(n) for n in names), names[:3]
        train_pids = {int(NAME.match(p.name)[1]) for p in files(small, domain, "bounding_box_train")}
        assert len(train_pids) == SMALL.ids_per_domain and 0 not in train_pids and -1 not in train_pids
        gallery = [int(NAME.match(p.name)[1]) for p in files(small, domain, "bounding_box_test")]
        assert gallery.count(0) == SMALL.distractors and gallery.count(-1) == SMALL.junk
        query = {int(NAME.match(p.name)[1]) for p in files(small, domain, "query")}
        assert 0 not in query and -1 not in query
        assert len(query) == SMALL.test_ids_per_domain
        assert not (train_pids & query)  # train and test identities are disjoint
        with Image.open(files(small, domain, "query")[0]) as im:
            assert im.size == (SMALL.width, SMALL.height) and im.mode == "RGB"


def test_every_query_has_a_cross_camera_positive(small):
    for domain in ("synthA", "synthB"):
        ds = load_dataset(small / domain, "market1501")
        gallery = {(pid, cam) for _, pid, cam in ds.gallery}
        for _, pid, cam in ds.query:
            assert any(p == pid and c != cam for p, c in gallery), (domain, pid, cam)


def test_identities_are_distinct_across_domains():
    a = {identity_appearance(SMALL, 0, pid) for pid in range(1, 11)}
    b = {identity_appearance(SMALL, 1, pid) for pid in range(1, 11)}
    assert len(a) == 10 and len(b) == 10 and not (a & b)


def test_deterministic_for_a_seed(small, tmp_path):
    again = generate_synthetic(tmp_path / "again", SMALL)
    other = generate_synthetic(tmp_path / "other", SynthConfig(**{**SMALL.to_dict(), "seed": 1}))
    rel = [p.relative_to(small) for p in sorted(small.rglob("*.jpg"))]
    assert rel == [p.relative_to(again) for p in sorted(again.rglob("*.jpg"))]
    assert all((small / r).read_bytes() == (again / r).read_bytes() for r in rel)
    same_name = [r for r in rel if (other / r).exists()]
    assert any((small / r).read_bytes() != (other / r).read_bytes() for r in same_name)


def test_refuses_non_empty_dir_and_cleans_up_after_a_crash(small, tmp_path, monkeypatch):
    with pytest.raises(DataError, match="not empty"):
        generate_synthetic(small, SMALL)
    calls = {"n": 0}
    real = synthetic._save_jpeg

    def flaky(arr, path, quality):
        calls["n"] += 1
        if calls["n"] == 20:
            raise OSError("disk full")
        real(arr, path, quality)

    monkeypatch.setattr(synthetic, "_save_jpeg", flaky)
    with pytest.raises(OSError, match="disk full"):
        generate_synthetic(tmp_path / "crash", SMALL)
    assert list(tmp_path.iterdir()) == []  # neither the target nor a temporary directory is left


def test_ensure_synthetic_caches(tmp_path, monkeypatch):
    first = ensure_synthetic(tmp_path, SMALL)
    monkeypatch.setattr(synthetic, "generate_synthetic", lambda *a, **k: pytest.fail("regenerated"))
    assert ensure_synthetic(tmp_path, SMALL) == first
    assert first.name.startswith("synth-")


def test_invalid_config():
    with pytest.raises(ConfigError, match="cams_per_domain"):
        generate_synthetic("/nonexistent/never", SynthConfig(cams_per_domain=1))


def mean_image(paths):
    return np.stack([np.asarray(Image.open(p), dtype=np.float32) for p in paths]).mean(0)


def test_identity_signal_and_domain_shift(tmp_path):
    cfg = SynthConfig(num_domains=2, ids_per_domain=8, test_ids_per_domain=2, cams_per_domain=2,
                      images_per_id_per_cam=3, height=64, width=32, distractors=0, junk=0, occlusion_prob=0.0)
    root = generate_synthetic(tmp_path / "sig", cfg)
    imgs = {}
    for p in (root / "synthA" / "bounding_box_train").iterdir():
        m = NAME.match(p.name)
        imgs.setdefault((int(m[1]), int(m[2])), []).append(np.asarray(Image.open(p), dtype=np.float32))
    within, across = [], []
    keys = sorted(imgs)
    for i, ka in enumerate(keys):
        for kb in keys[i:]:
            if ka[1] != kb[1]:
                continue  # same camera only: isolate identity from camera style
            for a in imgs[ka]:
                for b in imgs[kb]:
                    if a is b:
                        continue
                    (within if ka[0] == kb[0] else across).append(np.abs(a - b).mean())
    assert np.mean(within) < 0.85 * np.mean(across)
    # domain style: mean colour statistics of the two domains differ clearly
    mean_a = mean_image(sorted((root / "synthA" / "bounding_box_train").iterdir())).mean((0, 1))
    mean_b = mean_image(sorted((root / "synthB" / "bounding_box_train").iterdir())).mean((0, 1))
    assert np.abs(mean_a - mean_b).max() > 20
