"""Synthetic visible-infrared data: thermal rendering, camera/modality mix, identity missing, video, caching."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import privreid.data.synthetic_vi as svi
from privreid.cli import app
from privreid.data import INFRARED, VISIBLE
from privreid.data.catalog import resolve_datasets
from privreid.data.formats import read_image
from privreid.data.synthetic_cameras import camera_style
from privreid.data.synthetic_config import _rng
from privreid.data.synthetic_render import _draw_labels, render_person, sample_appearance, sample_pose
from privreid.data.synthetic_vi import (
    BOTH,
    SynthVIConfig,
    camera_modalities,
    ensure_synthetic_vi,
    generate_synthetic_vi,
    render_thermal,
    thermal_camera,
    walk_cycle,
)
from privreid.errors import ConfigError

TINY = SynthVIConfig(ids_per_entity=4, test_ids_per_entity=3, height=32, width=16)
TINY_VIDEO = replace(TINY, num_entities=2, video=True, frames_per_tracklet=3, shots_per_id_per_cam=1)


@pytest.fixture(scope="module")
def vi_dir(tmp_path_factory):
    return generate_synthetic_vi(tmp_path_factory.mktemp("vi") / "d", TINY)


@pytest.fixture(scope="module")
def video_dir(tmp_path_factory):
    return generate_synthetic_vi(tmp_path_factory.mktemp("vid") / "d", TINY_VIDEO)


def shots(root: Path, entity: str):
    """(split, modality, cam, pid, path) of every image (or tracklet folder) of an entity."""
    out = []
    for path in sorted((root / entity).glob("*/*/c*/*/*")):
        split, modality, cam, pid = path.relative_to(root / entity).parts[:4]
        out.append((split, modality, int(cam[1:]) - 1, int(pid), path))
    return out


def test_layout_manifest_and_camera_mix(vi_dir):
    manifest = json.loads((vi_dir / "manifest.json").read_text())
    assert manifest["format"] == "privreid-synthetic-vi" and manifest["domains"] == ["viA", "viB", "viC"]
    assert SynthVIConfig.from_dict(manifest["config"]) == TINY
    for e, entity in enumerate(manifest["domains"]):
        kinds = manifest["cameras"][entity]
        # the default pattern "vibv", rotated by the entity index: every entity has all three kinds
        assert kinds == camera_modalities(TINY, e) and set(kinds) == {VISIBLE, INFRARED, BOTH}
        assert kinds != camera_modalities(TINY, (e + 1) % 3)
        found = shots(vi_dir, entity)
        assert all(path.suffix == ".jpg" for *_, path in found)
        for split, modality, cam, pid, _ in found:
            assert kinds[cam] in (modality, BOTH)  # a visible-only camera never yields infrared, and vice versa
            assert (split == "train") == (pid <= TINY.ids_per_entity)
        dual = kinds.index(BOTH)
        assert {m for _, m, cam, _, _ in found if cam == dual} == {VISIBLE, INFRARED}
        counted = sum(v["shots"] for v in manifest["counts"][entity].values())
        assert counted == len(found)


def test_identity_missing_and_both_modalities_per_identity(vi_dir):
    missing = 0
    for entity in ("viA", "viB", "viC"):
        cams_of, modalities_of = {}, {}
        for _, modality, cam, pid, _ in shots(vi_dir, entity):
            cams_of.setdefault(pid, set()).add(cam)
            modalities_of.setdefault(pid, set()).add(modality)
        assert sorted(cams_of) == list(range(1, 8))
        assert all(modalities_of[pid] == {VISIBLE, INFRARED} for pid in cams_of)
        assert all(len(c) >= TINY.min_cams_per_id for c in cams_of.values())
        missing += sum(len(c) < TINY.cams_per_entity for c in cams_of.values())
    assert missing > 0, "some identities must be missing from some cameras"


def test_infrared_images_are_one_channel_replicated(vi_dir):
    infrared = sorted(vi_dir.glob("*/*/infrared/*/*/*.jpg"))
    visible = sorted(vi_dir.glob("*/*/visible/*/*/*.jpg"))
    assert infrared and visible
    for path in infrared:
        assert Image.open(path).mode == "L"
        rgb = np.asarray(read_image(path))
        assert rgb.shape == (32, 16, 3) and (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()
    colourful = [np.asarray(read_image(p)).astype(int) for p in visible[:20]]
    assert all(Image.open(p).mode == "RGB" for p in visible)
    assert np.mean([np.abs(a[..., 0] - a[..., 2]).mean() for a in colourful]) > 5


def test_loaded_by_catalog_with_modalities(vi_dir):
    datasets = resolve_datasets([str(vi_dir)])
    assert list(datasets) == ["viA", "viB", "viC"]
    for ds in datasets.values():
        assert ds.tracklets is None and ds.num_train_pids == 4
        assert {ds.modality[p] for p, _, _ in ds.query} == {INFRARED}
        assert {ds.modality[p] for p, _, _ in ds.gallery} == {VISIBLE}
        assert {ds.modality[p] for p, _, _ in ds.train} == {VISIBLE, INFRARED}
        assert {pid for _, pid, _ in ds.query} == {5, 6, 7} == {pid for _, pid, _ in ds.gallery}


def _subject():
    cfg = SynthVIConfig(height=64, width=32).style_config()
    visible = camera_style(cfg, 0, 1)
    key = (0, 1, 2)
    app = sample_appearance(_rng(*key), key)
    pose = replace(sample_pose(visible, _rng(5), occlusion_prob=0.0), view="front")
    return app, pose, visible


def test_thermal_loses_clothing_colour_keeps_shape_and_texture():
    app, pose, visible = _subject()
    ir = thermal_camera(visible)

    def render(a):
        return render_thermal(a, pose, ir, 64, 32, np.random.default_rng(3))

    base = render(app)
    assert (base[..., 0] == base[..., 1]).all() and (base[..., 0] == base[..., 2]).all()
    recoloured = replace(app, upper=(1.0, 0.0, 0.0), upper2=(0.0, 0.0, 1.0), lower=(0.0, 1.0, 0.0),
                         shoes=(1.0, 1.0, 0.0), accessory_colour=(0.5, 0.0, 0.5), hat=(0.0, 1.0, 1.0))
    assert np.array_equal(render(recoloured), base)  # colour is lost
    patterned = replace(app, upper_pattern="hstripes" if app.upper_pattern != "hstripes" else "solid")
    assert not np.array_equal(render(patterned), base)  # texture is kept
    reshaped = replace(app, build=app.build * 1.25)
    assert not np.array_equal(render(reshaped), base)  # shape is kept
    # and the visible rendering does see the colour change
    vis = [render_person(a, pose, visible, 64, 32, np.random.default_rng(3)) for a in (app, recoloured)]
    assert not np.array_equal(*vis)


def test_near_infrared_reflectance_keeps_brightness_not_hue():
    app, pose, visible = _subject()
    ir = replace(thermal_camera(visible), noise=0.0)

    def render(a, reflectance):
        return render_thermal(a, pose, ir, 64, 32, np.random.default_rng(3), reflectance).astype(int)

    def grey_of(colour):  # the same luminance, no hue
        v = float(np.dot(colour, [0.299, 0.587, 0.114]))
        return (v, v, v)

    garments = ("upper", "upper2", "lower", "lower2", "shoes", "accessory_colour", "hat", "logo_colour")
    same_brightness = replace(app, **{k: grey_of(getattr(app, k)) for k in garments})
    assert np.abs(render(same_brightness, 0.5) - render(app, 0.5)).max() <= 1  # hue is lost
    darker = replace(app, upper=tuple(0.2 * c for c in app.upper), upper2=tuple(0.2 * c for c in app.upper2))
    assert render(darker, 0.5).sum() < render(app, 0.5).sum()  # brightness partly kept
    assert np.array_equal(render(darker, 0.0), render(app, 0.0))  # pure thermal: nothing kept


def test_warm_body_on_cool_background():
    app, pose, visible = _subject()
    img = render_thermal(app, pose, replace(thermal_camera(visible), noise=0.0), 64, 32,
                         np.random.default_rng(0))[..., 0].astype(float)
    labels, _ = _draw_labels(app, pose, 64, 32)
    body = labels > 0
    assert body.sum() > 100
    assert img[body].mean() > img[~body].mean() + 60
    assert img[~body].mean() < 110


def test_walk_cycle():
    _, pose, _ = _subject()
    side = replace(pose, view="right")
    cycle = walk_cycle(side, 6)
    assert len(cycle) == 6 and cycle[0].phase == pytest.approx(side.phase)
    assert np.allclose(np.diff([p.phase for p in cycle]), 2 * math.pi / 6)
    assert np.all(np.diff([p.dx for p in cycle]) > 0)  # walking to the right drifts right
    assert walk_cycle(replace(pose, view="left"), 6)[-1].dx < pose.dx
    assert {p.view for p in cycle} == {"right"} and {p.scale for p in cycle} == {side.scale}
    assert walk_cycle(side, 1)[0] == side


def test_video_tracklets(video_dir):
    datasets = resolve_datasets([str(video_dir)])
    assert list(datasets) == ["vidA", "vidB"]
    for ds in datasets.values():
        samples = ds.train + ds.query + ds.gallery
        assert set(ds.tracklets) == {key for key, _, _ in samples}
        for key, _, _ in samples:
            frames = ds.tracklets[key]
            assert len(frames) == 3 and all(Path(f).parent == Path(key) for f in frames)
        assert {ds.modality[k] for k, _, _ in ds.query} == {INFRARED}
    # consecutive frames of one tracklet differ (the walk advances) but show one person in one camera
    key = ds.train[0][0]
    a, b = (np.asarray(read_image(f)).astype(float) for f in ds.tracklets[key][:2])
    assert 0 < np.abs(a - b).mean() < 40


def test_deterministic_for_a_seed(tmp_path, vi_dir):
    again = generate_synthetic_vi(tmp_path / "again", TINY)
    files = sorted(p.relative_to(vi_dir) for p in vi_dir.rglob("*.jpg"))
    assert files == sorted(p.relative_to(again) for p in again.rglob("*.jpg"))
    assert all((vi_dir / f).read_bytes() == (again / f).read_bytes() for f in files)
    other = generate_synthetic_vi(tmp_path / "other", replace(TINY, seed=1, num_entities=1))
    other_files = {p.relative_to(other): p.read_bytes() for p in other.rglob("*.jpg")}
    same = [f for f, data in other_files.items() if (vi_dir / f).is_file() and (vi_dir / f).read_bytes() == data]
    assert other_files and len(same) < 0.1 * len(other_files)


def test_ensure_synthetic_vi_caches(tmp_path, monkeypatch):
    cfg = replace(TINY, num_entities=1)
    path = ensure_synthetic_vi(tmp_path, cfg)
    assert path.parent == tmp_path and path.name.startswith("synthvi-")

    def boom(*args, **kwargs):
        raise AssertionError("regenerated a cached dataset")

    monkeypatch.setattr(svi, "generate_synthetic_vi", boom)
    assert ensure_synthetic_vi(tmp_path, cfg) == path
    with pytest.raises(AssertionError, match="regenerated"):
        ensure_synthetic_vi(tmp_path, replace(cfg, seed=3))


@pytest.mark.parametrize("changes", [
    {"camera_modalities": "vvv"},  # no infrared camera
    {"ir_reflectance": 1.5},
    {"camera_modalities": "vx"},
    {"cams_per_entity": 1},
    {"num_entities": 27},
    {"min_cams_per_id": 5},
])
def test_invalid_config(changes):
    with pytest.raises(ConfigError, match="SynthVIConfig"):
        replace(TINY, **changes).validate()


def test_cli_data_synth_vi(tmp_path):
    runner = CliRunner()
    out = tmp_path / "vi"
    res = runner.invoke(app, ["data", "synth", "--vi", "--domains", "1", "--height", "32", "--width", "16",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["domains"] == ["viA"] and manifest["config"]["height"] == 32
    res = runner.invoke(app, ["data", "synth", "--video", "--domains", "30", "--out", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "num_entities" in res.output and not (tmp_path / "bad").exists()
