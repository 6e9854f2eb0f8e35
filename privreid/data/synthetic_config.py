"""The synthetic federation's configuration, versions and seeded random streams (:mod:`privreid.data.synthetic`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Self

import numpy as np

from privreid.errors import ConfigError

#: Version of the on-disk layout / manifest schema.
FORMAT_VERSION = 1
#: Bumped whenever the pedestrian renderer (:mod:`.synthetic_render`, :mod:`.synthetic_cameras`) changes
#: what it draws; part of the cache key of every generator that draws with it (see :func:`config_hash`).
#: 2: identity-specific fine prints on the garments (issue 15).
RENDER_VERSION = 2
#: Market-1501 split folders, in the order they are written.
SPLITS = ("bounding_box_train", "query", "bounding_box_test")

# Stream tags mixed into the seed of every random draw, so that each draw depends
# only on (seed, domain, what, which) and never on iteration order or config sizes.
_TAG_DOMAIN = 1
_TAG_CAMERA = 2
_TAG_IDENTITY = 3
_TAG_IMAGE = 4
_TAG_DISTRACTOR = 5
_TAG_JUNK = 6
_TAG_SPLIT = 7


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class RenderedImages:
    """What every config of rendered pedestrian images states: the seed and the image size (shared by
    :class:`GeneratorConfig` and :class:`~privreid.data.synthetic_dg.SynthDGConfig`; a subclass may re-declare
    the size's default, keeping the field's place)."""

    seed: int = 0
    height: int = 128
    width: int = 64


@dataclass(frozen=True)
class GeneratorConfig(RenderedImages):
    """What the pedestrian generators' configs share (:class:`SynthConfig`, the VI set's): the fields of
    :class:`RenderedImages`, ``domain_shift``, ``camera_jitter``, ``occlusion_prob``, ``jpeg_quality``, their
    checks (one ConfigError line naming the class) and the dict round trip. :func:`config_hash` sorts keys, so
    the cache key does not depend on where a field is declared."""

    #: 0 = all domains (VI: entities) share the neutral camera style, 1 = the calibrated shift
    domain_shift: float = 0.7
    #: scale of the camera-to-camera style variation inside a domain
    camera_jitter: float = 1.0
    #: probability that an image carries an occluder (pole, box, passer-by edge)
    occlusion_prob: float = 0.2
    jpeg_quality: int = 90

    def _require(self, cond: bool, msg: str) -> None:
        if not cond:
            raise ConfigError(f"{type(self).__name__}: {msg}")

    def _check_rendering(self) -> None:
        # the random streams take the seed modulo 2**32 (_rng): a seed outside would alias one inside
        self._require(0 <= self.seed < 2**32, "seed must be in 0..4294967295")
        self._require(16 <= self.height <= 1024 and 8 <= self.width <= 512, "image size out of range")
        self._require(self.domain_shift >= 0 and self.camera_jitter >= 0, "shift/jitter must be >= 0")
        self._require(0.0 <= self.occlusion_prob <= 1.0, "occlusion_prob must be in [0, 1]")
        self._require(1 <= self.jpeg_quality <= 100, "jpeg_quality must be in 1..100")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Self:
        """The config with the fields of ``d``; ConfigError for a name that is not a field."""
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
        return cls(**d)


@dataclass(frozen=True)
class SynthConfig(GeneratorConfig):
    """Everything that determines a synthetic federation (and its cache key).

    The defaults are the demo settings the calibration below was measured at.
    """

    num_domains: int = 4
    #: training identities per domain (pids ``1..ids_per_domain``)
    ids_per_domain: int = 120
    #: test identities per domain (pids after the training ones; disjoint)
    test_ids_per_domain: int = 50
    cams_per_domain: int = 5
    #: every identity is seen by a random subset of at least this many cameras
    min_cams_per_id: int = 2
    #: images of one identity in one camera (train split and gallery)
    images_per_id_per_cam: int = 3
    #: at most this many query cameras per test identity (one query image each)
    max_query_cams: int = 2
    #: pid-0 gallery images per domain (badly framed strangers)
    distractors: int = 20
    #: pid -1 gallery images per domain (background / fragments)
    junk: int = 10

    def validate(self) -> None:
        need = self._require
        need(1 <= self.num_domains <= 26 * 27, "num_domains must be in 1..702")
        need(self.ids_per_domain >= 1, "ids_per_domain must be >= 1")
        need(self.test_ids_per_domain >= 1, "test_ids_per_domain must be >= 1")
        need(
            self.ids_per_domain + self.test_ids_per_domain <= 9999,
            "ids_per_domain + test_ids_per_domain must be <= 9999 (4-digit pids)",
        )
        need(2 <= self.cams_per_domain <= 9, "cams_per_domain must be in 2..9")
        need(
            2 <= self.min_cams_per_id <= self.cams_per_domain,
            "min_cams_per_id must be in 2..cams_per_domain",
        )
        need(self.images_per_id_per_cam >= 1, "images_per_id_per_cam must be >= 1")
        need(self.max_query_cams >= 1, "max_query_cams must be >= 1")
        need(self.distractors >= 0 and self.junk >= 0, "distractors/junk must be >= 0")
        self._check_rendering()


def domain_names(config: SynthConfig | None = None) -> list[str]:
    """``["synthA", "synthB", ...]`` (then ``synthAA``, ``synthAB`` ... past 26)."""
    config = config or SynthConfig()
    out = []
    for i in range(config.num_domains):
        if i < 26:
            out.append("synth" + chr(65 + i))
        else:
            j = i - 26
            out.append("synth" + chr(65 + j // 26) + chr(65 + j % 26))
    return out


def config_hash(config, format_version: int = FORMAT_VERSION, render_version: int = RENDER_VERSION) -> str:
    """Short stable hash of a generator config plus the format/render versions; always includes
    :data:`RENDER_VERSION` (also with the VI set's own ``render_version``), so no cache serves an older renderer."""
    payload = json.dumps(
        {"config": asdict(config), "format": format_version, "render": render_version,
         "person_render": RENDER_VERSION},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(k) & 0xFFFFFFFF for k in key]))
