"""The config base shared by the pedestrian generators (privreid.data.synthetic_config.GeneratorConfig)."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from privreid.data.synthetic_config import GeneratorConfig, SynthConfig
from privreid.data.synthetic_dg import SynthDGConfig
from privreid.data.synthetic_vi import SynthVIConfig
from privreid.errors import ConfigError

#: one out-of-range value of each shared rendering field, and the message it gets
RENDERING_ERRORS = [
    ({"height": 15}, "image size out of range"),
    ({"height": 1025}, "image size out of range"),
    ({"width": 7}, "image size out of range"),
    ({"width": 513}, "image size out of range"),
    ({"domain_shift": -0.1}, "shift/jitter must be >= 0"),
    ({"camera_jitter": -0.1}, "shift/jitter must be >= 0"),
    ({"occlusion_prob": -0.01}, "occlusion_prob must be in [0, 1]"),
    ({"occlusion_prob": 1.01}, "occlusion_prob must be in [0, 1]"),
    ({"jpeg_quality": 0}, "jpeg_quality must be in 1..100"),
    ({"jpeg_quality": 101}, "jpeg_quality must be in 1..100"),
    ({"seed": -1}, "seed must be in 0..4294967295"),  # was accepted, and drew the images of seed 2**32 - 1
    ({"seed": 2**32}, "seed must be in 0..4294967295"),
]


@pytest.mark.parametrize("cls", [SynthConfig, SynthVIConfig])
@pytest.mark.parametrize("changes, message", RENDERING_ERRORS)
def test_rendering_checks_name_the_config_class(cls, changes, message):
    with pytest.raises(ConfigError) as err:
        replace(cls(), **changes).validate()
    assert str(err.value) == f"{cls.__name__}: {message}"


@pytest.mark.parametrize("cls", [SynthConfig, SynthVIConfig])
def test_rendering_bounds_are_inclusive(cls):
    for changes in ({"height": 16, "width": 8}, {"height": 1024, "width": 512},
                    {"domain_shift": 0.0, "camera_jitter": 0.0, "occlusion_prob": 0.0, "jpeg_quality": 1},
                    {"occlusion_prob": 1.0, "jpeg_quality": 100, "seed": 2**32 - 1}):
        replace(cls(), **changes).validate()


@pytest.mark.parametrize("cls", [SynthConfig, SynthVIConfig])
def test_dict_round_trip_and_unknown_fields(cls):
    config = replace(cls(), seed=7, height=32, width=16)
    assert cls.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError) as err:
        cls.from_dict({**config.to_dict(), "zeta": 1, "alpha": 2})
    assert str(err.value) == f"{cls.__name__}: unknown fields ['alpha', 'zeta']"


def test_the_base_declares_the_shared_rendering_fields():
    """Each generator keeps its field set (its hash and manifest bytes are pinned by tests/test_synthetic_split.py,
    which sort the keys); the fields that default alike are declared once, in the base."""
    shared = ["seed", "height", "width", "domain_shift", "camera_jitter", "occlusion_prob", "jpeg_quality"]
    assert [f.name for f in fields(GeneratorConfig)] == shared
    assert {f.name for f in fields(SynthConfig)} == {
        "num_domains", "ids_per_domain", "test_ids_per_domain", "cams_per_domain", "min_cams_per_id",
        "images_per_id_per_cam", "max_query_cams", "distractors", "junk", *shared}
    assert {f.name for f in fields(SynthVIConfig)} == {
        "num_entities", "ids_per_entity", "test_ids_per_entity", "cams_per_entity", "camera_modalities",
        "min_cams_per_id", "shots_per_id_per_cam", "ir_reflectance", "video", "frames_per_tracklet", *shared}
    assert {f.name for f in fields(SynthDGConfig)} == {"people", "distractors", "ilids_images", *shared[:3]}
    assert (SynthConfig().height, SynthConfig().width, SynthDGConfig().height, SynthDGConfig().width) == (
        128, 64, 128, 64)
    assert (SynthVIConfig().height, SynthVIConfig().width) == (64, 32)
    for cls in (SynthConfig, SynthVIConfig):
        assert (cls().seed, cls().domain_shift, cls().jpeg_quality) == (0, 0.7, 90)
