"""Tests for the procedural multi-domain ReID generator (privreid.data.synthetic)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from privreid import __version__
from privreid.data import synthetic as syn
from privreid.data import synthetic_config
from privreid.data.synthetic_cache import DATASET_MARKER
from privreid.data.synthetic import (
    SynthConfig,
    domain_names,
    ensure_synthetic,
    generate_synthetic,
    identity_appearance,
)
from privreid.errors import ConfigError, DataError

NAME_RE = re.compile(r"^([-\d]+)_c(\d)s1_(\d{6})_(\d{2})\.jpg$")

SMALL = SynthConfig(
    num_domains=2,
    ids_per_domain=6,
    test_ids_per_domain=6,
    cams_per_domain=3,
    images_per_id_per_cam=2,
    height=32,
    width=16,
    distractors=3,
    junk=2,
    seed=0,
)


def _parse(folder: Path) -> list[tuple[str, int, int]]:
    out = []
    for f in sorted(folder.iterdir()):
        m = NAME_RE.match(f.name)
        assert m, f"bad file name {f.name}"
        out.append((f.name, int(m.group(1)), int(m.group(2))))
    return out


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory) -> Path:
    return generate_synthetic(tmp_path_factory.mktemp("syn") / "out", SMALL)


def test_layout_names_and_counts(small_dir: Path):
    names = domain_names(SMALL)
    assert names == ["synthA", "synthB"]
    assert sorted(p.name for p in small_dir.iterdir()) == sorted(names + ["manifest.json", DATASET_MARKER])
    manifest = json.loads((small_dir / "manifest.json").read_text())
    assert manifest["domains"] == names
    assert manifest["config"] == SMALL.to_dict()
    assert manifest["privreid_version"] == __version__
    assert manifest["format_version"] == synthetic_config.FORMAT_VERSION
    for d in names:
        assert sorted(p.name for p in (small_dir / d).iterdir()) == sorted(syn.SPLITS)
        train = _parse(small_dir / d / "bounding_box_train")
        query = _parse(small_dir / d / "query")
        gallery = _parse(small_dir / d / "bounding_box_test")
        for split, recs in (("bounding_box_train", train), ("query", query),
                            ("bounding_box_test", gallery)):
            assert manifest["counts"][d][split]["images"] == len(recs)
        # pids / cams match the config
        assert {p for _, p, _ in train} == set(range(1, SMALL.ids_per_domain + 1))
        test_pids = set(range(SMALL.ids_per_domain + 1,
                              SMALL.ids_per_domain + SMALL.test_ids_per_domain + 1))
        assert {p for _, p, _ in query} == test_pids
        assert {p for _, p, _ in gallery} - {0, -1} == test_pids
        cams = {c for _, _, c in train + query + gallery}
        assert cams <= set(range(1, SMALL.cams_per_domain + 1))
        assert len({c for _, _, c in train}) == SMALL.cams_per_domain
        # distractors and junk only in the gallery
        assert sum(p == 0 for _, p, _ in gallery) == SMALL.distractors
        assert sum(p == -1 for _, p, _ in gallery) == SMALL.junk
        assert all(p > 0 for _, p, _ in train + query)
        # train and test identities are disjoint
        assert not ({p for _, p, _ in train} & ({p for _, p, _ in query + gallery} - {0, -1}))
        # per (pid, cam) the train split has images_per_id_per_cam images
        per = defaultdict(int)
        for _, p, c in train:
            per[p, c] += 1
        assert set(per.values()) == {SMALL.images_per_id_per_cam}
        assert all(len({c for (q, c) in per if q == p}) >= SMALL.min_cams_per_id
                   for p in {p for p, _ in per})
        # file names are unique within a domain and images are real JPEGs of the right size
        allnames = [n for n, _, _ in train + query + gallery]
        assert len(allnames) == len(set(allnames))
        with Image.open(small_dir / d / "query" / query[0][0]) as im:
            assert im.format == "JPEG"
            assert im.size == (SMALL.width, SMALL.height)
            assert im.mode == "RGB"


def test_every_query_has_cross_camera_positive(small_dir: Path):
    for d in domain_names(SMALL):
        query = _parse(small_dir / d / "query")
        gallery = _parse(small_dir / d / "bounding_box_test")
        for _, pid, cam in query:
            assert any(gp == pid and gc != cam for _, gp, gc in gallery), (d, pid, cam)


def test_identities_distinct_across_domains_and_splits():
    apps = {}
    for d in range(SMALL.num_domains):
        for pid in range(1, SMALL.ids_per_domain + SMALL.test_ids_per_domain + 1):
            apps[d, pid] = identity_appearance(SMALL, d, pid)
    keys = [a.seed_key for a in apps.values()]
    assert len(set(keys)) == len(keys)
    # the same pid number in two domains is a different person
    for pid in range(1, SMALL.ids_per_domain + SMALL.test_ids_per_domain + 1):
        assert apps[0, pid] != apps[1, pid]
    # appearances are not accidentally identical either (ignoring the key)
    looks = {(a.upper, a.lower, a.skin, a.upper_pattern) for a in apps.values()}
    assert len(looks) == len(apps)
    # deterministic
    assert identity_appearance(SMALL, 1, 3) == apps[1, 3]


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_determinism(tmp_path: Path, small_dir: Path):
    again = generate_synthetic(tmp_path / "again", SMALL)
    a, b = _tree_bytes(small_dir), _tree_bytes(again)
    assert a.keys() == b.keys()
    assert a == b
    other = generate_synthetic(tmp_path / "other", SynthConfig(**{**SMALL.to_dict(), "seed": 1}))
    c = _tree_bytes(other)
    jpgs = [k for k in a if k.endswith(".jpg") and k in c]
    assert jpgs
    assert sum(a[k] != c[k] for k in jpgs) > 0.9 * len(jpgs)


def test_refuses_nonempty_out_dir(tmp_path: Path):
    out = tmp_path / "x"
    out.mkdir()
    (out / "keep.txt").write_text("hi")
    with pytest.raises(DataError):
        generate_synthetic(out, SMALL)
    assert (out / "keep.txt").read_text() == "hi"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]
    # overwrite=True never replaces a directory privreid did not write
    with pytest.raises(DataError, match="not a dataset privreid generated"):
        generate_synthetic(out, SMALL, overwrite=True)
    assert (out / "keep.txt").read_text() == "hi"
    # an existing empty directory is fine, and overwrite=True replaces a generated dataset
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = SynthConfig(**{**SMALL.to_dict(), "num_domains": 1})
    generate_synthetic(empty, cfg)
    assert (empty / "manifest.json").exists()
    (empty / "synthA" / "query" / "extra.jpg").write_bytes(b"")  # not privreid's: --overwrite refuses (issue 39)
    with pytest.raises(DataError, match="extra.jpg, which privreid did not write"):
        generate_synthetic(empty, cfg, overwrite=True)
    (empty / "synthA" / "query" / "extra.jpg").unlink()
    generate_synthetic(empty, cfg, overwrite=True)
    assert (empty / "manifest.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "x"]


def test_crash_leaves_nothing(tmp_path: Path, monkeypatch):
    calls = {"n": 0}
    real = syn._save_jpeg

    def flaky(arr, path, quality):
        calls["n"] += 1
        if calls["n"] == 25:
            raise OSError("disk full (simulated)")
        real(arr, path, quality)

    monkeypatch.setattr(syn, "_save_jpeg", flaky)
    with pytest.raises(OSError, match="simulated"):
        generate_synthetic(tmp_path / "out", SMALL)
    assert calls["n"] == 25
    assert list(tmp_path.iterdir()) == []


def test_invalid_config():
    with pytest.raises(ConfigError):
        SynthConfig(cams_per_domain=10).validate()
    with pytest.raises(ConfigError):
        SynthConfig(min_cams_per_id=1).validate()


def test_ensure_synthetic_caches(tmp_path: Path, monkeypatch):
    cfg = SynthConfig(**{**SMALL.to_dict(), "num_domains": 1})
    p1 = ensure_synthetic(tmp_path, cfg)
    assert p1.parent == tmp_path and p1.name == "synth-" + synthetic_config.config_hash(cfg)
    assert json.loads((p1 / "manifest.json").read_text())["config"] == cfg.to_dict()

    def boom(*a, **k):
        raise AssertionError("regenerated a cached dataset")

    monkeypatch.setattr(syn, "generate_synthetic", boom)
    assert ensure_synthetic(tmp_path, cfg) == p1
    # the env var sets the default cache root
    monkeypatch.setenv("PRIVREID_CACHE", str(tmp_path))
    assert ensure_synthetic(config=cfg) == p1
    # a different config is a different directory
    monkeypatch.setattr(syn, "generate_synthetic", generate_synthetic)
    p2 = ensure_synthetic(tmp_path, SynthConfig(**{**cfg.to_dict(), "seed": 5}))
    assert p2 != p1 and (p2 / "manifest.json").exists()
    # a broken manifest triggers regeneration into the same place
    (p1 / "manifest.json").write_text("{not json")
    assert ensure_synthetic(tmp_path, cfg) == p1
    assert json.loads((p1 / "manifest.json").read_text())["config"] == cfg.to_dict()


def _render(cfg: SynthConfig, d: int, pid: int, cam: int, k: int) -> np.ndarray:
    camera = syn.camera_style(cfg, d, cam)
    rng = np.random.default_rng([cfg.seed, d, pid, cam, k])
    pose = syn.sample_pose(camera, rng, occlusion_prob=0.0)
    app = identity_appearance(cfg, d, pid)
    return syn.render_person(app, pose, camera, cfg.height, cfg.width, rng).astype(np.float32)


def test_identity_signal():
    """Same identity, same camera: closer in coarse colour layout (4x4 pixel means; the fine prints
    shift with the pose) than different identities."""
    cfg = SynthConfig(height=64, width=32)
    within, across = [], []
    for d in range(2):
        imgs = {pid: [_render(cfg, d, pid, 0, k) for k in range(4)] for pid in range(1, 13)}
        # central crop (the body), mean over channels' spatial layout
        crop = {p: [im[8:56, 8:24].reshape(12, 4, 4, 4, 3).mean(axis=(1, 3)) for im in v]
                for p, v in imgs.items()}
        for p, v in crop.items():
            within += [np.abs(v[i] - v[j]).mean() for i in range(4) for j in range(i + 1, 4)]
            for q in crop:
                if q > p:
                    across.append(np.abs(v[0] - crop[q][0]).mean())
    assert np.mean(within) < 0.75 * np.mean(across)


def test_domain_style_shift():
    """Mean colour statistics differ clearly between domains, less between cameras."""
    cfg = SynthConfig(height=64, width=32)
    stats = {}
    for d in range(4):
        ims = np.stack([_render(cfg, d, pid, cam, 0)
                        for pid in range(1, 7) for cam in range(cfg.cams_per_domain)])
        stats[d] = np.concatenate([ims.mean(axis=(0, 1, 2)), ims.std(axis=(0, 1, 2))])
    for a in range(4):
        for b in range(a + 1, 4):
            assert np.abs(stats[a] - stats[b]).max() > 15, (a, b, stats[a], stats[b])
    # domain_shift=0 collapses the domains towards one style
    flat = SynthConfig(height=64, width=32, domain_shift=0.0)
    means = [np.stack([_render(flat, d, pid, 0, 0) for pid in range(1, 7)]).mean(axis=(0, 1, 2))
             for d in range(4)]
    spread0 = np.ptp(np.stack(means), axis=0).max()
    spread1 = np.ptp(np.stack([s[:3] for s in stats.values()]), axis=0).max()
    assert spread0 < 0.5 * spread1


def test_more_domains_and_names():
    cfg = SynthConfig(num_domains=30)
    names = domain_names(cfg)
    assert names[:3] == ["synthA", "synthB", "synthC"] and names[26] == "synthAA"
    assert len(set(names)) == 30
    # styles past the four presets are generated and rendered fine
    img = _render(SynthConfig(num_domains=6, height=32, width=16), 5, 1, 0, 0)
    assert img.shape == (32, 16, 3)


def test_fine_prints_are_seeded_identity_specific_and_periodic():
    """Each identity's garments carry a seeded print; a stripe print repeats exactly at its period
    (4-11% of the person's height) along its wave vector and is constant across it."""
    from privreid.data.synthetic_render import Texture

    cfg = SynthConfig()
    apps = [identity_appearance(cfg, 0, pid) for pid in range(1, 41)]
    assert identity_appearance(cfg, 0, 1) == apps[0]  # deterministic
    prints = {(a.upper_texture, a.lower_texture) for a in apps}
    assert len(prints) == len(apps)  # no two identities share their prints
    assert {a.upper_texture.kind for a in apps} == {"stripes", "checks", "dots", "print"}
    for a in apps:
        for tex in (a.upper_texture, a.lower_texture):
            periods = [1 / np.hypot(kx, ky) for kx, ky, _ in tex.waves]
            assert all(0.04 * 0.7 - 1e-3 <= p <= 0.11 * 1.4 + 1e-3 for p in periods)
            assert 0.35 <= tex.contrast <= 0.8
    stripes = Texture("stripes", ((3.0, 4.0, 0.5),), sharpness=2.0, contrast=0.5)  # period 1/5
    x, y = np.random.default_rng(0).uniform(-1, 1, (2, 200))
    f = stripes.field(x, y)
    assert f.min() >= 0 and f.max() <= 1 and np.ptp(f) > 0.9
    np.testing.assert_allclose(stripes.field(x + 0.6 / 5, y + 0.8 / 5), f, atol=1e-9)  # one period along k
    np.testing.assert_allclose(stripes.field(x - 0.8 * 0.37, y + 0.6 * 0.37), f, atol=1e-9)  # across k


def test_fine_prints_add_high_frequency_detail_to_the_garments():
    """The prints put fine detail (pixel-to-pixel contrast) on the garments that flat colours lack."""
    from dataclasses import replace as dc_replace

    cfg = SynthConfig(height=128, width=64)
    camera = syn.camera_style(cfg, 0, 0)

    def detail(app) -> float:
        rng = np.random.default_rng(1)
        pose = dc_replace(syn.sample_pose(camera, rng, 0.0), view="front")
        img = syn.render_person(app, pose, dc_replace(camera, noise=0.0, lowres=1.0), 128, 64, rng)
        body = img[45:85, 24:40].astype(np.float32)  # the torso
        return float(np.abs(np.diff(body, axis=0)).mean() + np.abs(np.diff(body, axis=1)).mean())

    ratios = []
    for pid in range(1, 9):
        a = identity_appearance(cfg, 0, pid)
        flat = dc_replace(a, upper_pattern="solid", upper_texture=dc_replace(a.upper_texture, contrast=0.0),
                          lower_texture=dc_replace(a.lower_texture, contrast=0.0))
        ratios.append(detail(dc_replace(flat, upper_texture=a.upper_texture)) / detail(flat))
    assert np.median(ratios) > 2.0, ratios


def test_cache_key_follows_the_pedestrian_renderer(tmp_path: Path, monkeypatch):
    """A new pedestrian renderer (RENDER_VERSION) moves every generator's cache entry, also the VI set's,
    which has a render version of its own: no stale images are served."""
    from privreid.data.synthetic_vi import VI_FORMAT_VERSION, VI_RENDER_VERSION, SynthVIConfig

    cfg = SynthConfig(**{**SMALL.to_dict(), "num_domains": 1, "ids_per_domain": 2, "test_ids_per_domain": 2})
    vi = SynthVIConfig()
    p1 = ensure_synthetic(tmp_path, cfg)
    assert json.loads((p1 / "manifest.json").read_text())["person_render_version"] == synthetic_config.RENDER_VERSION
    config_hash = synthetic_config.config_hash
    before = (config_hash(cfg), config_hash(vi, VI_FORMAT_VERSION, VI_RENDER_VERSION))
    monkeypatch.setattr(synthetic_config, "RENDER_VERSION", synthetic_config.RENDER_VERSION + 1)
    after = (config_hash(cfg), config_hash(vi, VI_FORMAT_VERSION, VI_RENDER_VERSION))
    assert before[0] != after[0] and before[1] != after[1]
    # an entry whose manifest names an older renderer is not valid, even at the same path
    calls = []
    path = syn.ensure_cached("synth", cfg, lambda p, overwrite: calls.append(p) or p, tmp_path,
                             render_version=1)
    (path / "manifest.json").parent.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((p1 / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "render_version": 1}))
    syn.ensure_cached("synth", cfg, lambda p, overwrite: calls.append(p) or p, tmp_path, render_version=1)
    assert calls == [path, path]
