"""Procedural multi-domain person re-identification data (calibration: see below).

Each identity has a persistent appearance (clothing colours *and* patterns,
hair, skin, accessory and its side, body proportions) drawn as a pedestrian
with pose, viewpoint, scale / translation jitter and occluders.  Each camera
has its own style (illumination, colour cast, contrast, blur, noise,
background); cameras are grouped into domains whose style distributions
differ strongly (bright/warm, dark/blue, hazy/grey/noisy, saturated, ...).
Identity sets are disjoint across domains.  Output is real JPEG files in the
Market-1501 layout, so the real-data loader reads it.

Calibration (measured on the 2-core CPU machine; untrained = the common
initialisation; R1 on each domain's query/gallery, torchreid protocol; the
training recipe is the demo's: ResNet-18 from scratch, 64x32 input, SGD lr
0.05, batch 32, 3 training domains synthA-C, synthD held out)::

    domain_shift  method       epochs  seen R1 A / B / C     unseen R1 D
    1.0           centralized  4       60.9 / 22.9 / 48.6    8.7
    0.5           centralized  4       94.2 / 90.0 / 91.9    65.2
    0.75          centralized  5       91.3 / 65.7 / 82.4    34.8
    0.75          fedpav       5       50.7 / 57.1 / 79.7    17.4
    0.7 (default) centralized  5       95.7 / 88.6 / 91.9    30.4
    0.7 (default) fedpav       5       65.2 / 55.7 / 81.1    40.6
    0.7 (default) untrained    -       mean 4.2              1.4

The default (0.7) meets the targets of docs/architecture.md: trained seen-domain R1 in
50-90% (FedPav; centralised slightly above on average, 92.0%), unseen R1 in
20-70%, untrained below 10%.  The last three rows are ``make demo`` (each run
about 110 s); the others are ``privreid train --data DIR --test-domains synthD
--method M --rounds N --height 64 --width 32 --lr-backbone 0.05 --lr-head
0.05`` on data from ``generate_synthetic(DIR, SynthConfig(domain_shift=S))``.
The default federation holds 7,458 images (4 domains x 120 train + 50 test
identities, 5 cameras) and renders at about 550 images/s.
"""

from __future__ import annotations

import colorsys
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from privreid import __version__
from privreid.errors import ConfigError, DataError

__all__ = [
    "FORMAT_VERSION",
    "RENDER_VERSION",
    "SPLITS",
    "Appearance",
    "CameraStyle",
    "Pose",
    "SynthConfig",
    "camera_style",
    "config_hash",
    "domain_names",
    "domain_preset",
    "ensure_cached",
    "ensure_synthetic",
    "ensure_synthetic_extra",
    "extra_samples",
    "generate_synthetic_extra",
    "SynthExtraConfig",
    "generate_synthetic",
    "identity_appearance",
    "render_person",
    "sample_appearance",
    "sample_pose",
    "write_atomically",
    "write_manifest",
]

#: Version of the on-disk layout / manifest schema.
FORMAT_VERSION = 1
#: Bumped whenever the renderer changes what it draws; part of the cache key.
RENDER_VERSION = 1
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

_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class SynthConfig:
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
    height: int = 128
    width: int = 64
    #: pid-0 gallery images per domain (badly framed strangers)
    distractors: int = 20
    #: pid -1 gallery images per domain (background / fragments)
    junk: int = 10
    seed: int = 0
    #: 0 = all domains share the neutral camera style, 1 = the calibrated shift
    domain_shift: float = 0.7
    #: scale of the camera-to-camera style variation inside a domain
    camera_jitter: float = 1.0
    #: probability that an image carries an occluder (pole, box, passer-by edge)
    occlusion_prob: float = 0.2
    jpeg_quality: int = 90

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"SynthConfig: {msg}")

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
        need(16 <= self.height <= 1024 and 8 <= self.width <= 512, "image size out of range")
        need(self.distractors >= 0 and self.junk >= 0, "distractors/junk must be >= 0")
        need(self.domain_shift >= 0 and self.camera_jitter >= 0, "shift/jitter must be >= 0")
        need(0.0 <= self.occlusion_prob <= 1.0, "occlusion_prob must be in [0, 1]")
        need(1 <= self.jpeg_quality <= 100, "jpeg_quality must be in 1..100")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SynthConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ConfigError(f"SynthConfig: unknown fields {sorted(unknown)}")
        return cls(**d)


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
    """Short stable hash of a generator config (a dataclass) plus the format/render versions."""
    payload = json.dumps(
        {"config": asdict(config), "format": format_version, "render": render_version},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(k) & 0xFFFFFFFF for k in key]))


# --------------------------------------------------------------------------- appearance

UPPER_PATTERNS = ("solid", "hstripes", "vstripes", "checks", "block", "band")
LOWER_TYPES = ("trousers", "shorts", "skirt")
HAIR_STYLES = ("short", "long", "bald", "bun", "hat")
ACCESSORIES = ("none", "shoulder_bag", "backpack", "handbag")

_SKIN_TONES = np.array(
    [[0.96, 0.80, 0.69], [0.90, 0.70, 0.55], [0.78, 0.57, 0.42], [0.60, 0.42, 0.30],
     [0.42, 0.28, 0.20], [0.30, 0.20, 0.14]],
    dtype=np.float32,
)
_HAIR_COLOURS = np.array(
    [[0.06, 0.05, 0.05], [0.20, 0.12, 0.07], [0.40, 0.26, 0.14], [0.85, 0.72, 0.42],
     [0.70, 0.70, 0.70], [0.55, 0.22, 0.10], [0.95, 0.95, 0.92]],
    dtype=np.float32,
)


Colour = tuple[float, float, float]


@dataclass(frozen=True)
class Appearance:
    """The persistent look of one identity (everything except pose and camera)."""

    seed_key: tuple[int, ...]
    skin: Colour
    hair: Colour
    hair_style: str
    hat: Colour
    upper: Colour
    upper2: Colour
    upper_pattern: str
    stripe_count: int
    long_sleeves: bool
    coat: bool
    logo: str  # "none" | "rect" | "disc" | "bar"
    logo_colour: Colour
    lower: Colour
    lower2: Colour
    lower_type: str
    lower_stripe: bool
    shoes: Colour
    accessory: str
    accessory_colour: Colour
    accessory_side: str  # "L" | "R" (the person's side)
    height: float  # fraction of the nominal person height
    build: float  # width factor
    leg: float  # leg length / body height
    head: float  # head height / body height


def _colour(rng: np.random.Generator, achromatic_p: float = 0.35) -> Colour:
    if rng.random() < achromatic_p:
        v = float(rng.choice([0.08, 0.2, 0.35, 0.55, 0.75, 0.92]) + rng.uniform(-0.05, 0.05))
        s = float(rng.uniform(0.0, 0.12))
    else:
        v = float(rng.uniform(0.25, 0.95))
        s = float(rng.uniform(0.45, 1.0))
    h = float(rng.random())
    r, g, b = colorsys.hsv_to_rgb(h, s, min(max(v, 0.0), 1.0))
    return (round(r, 4), round(g, 4), round(b, 4))


def _contrasting(rng: np.random.Generator, c: Colour, min_dl: float = 0.3) -> Colour:
    """A second colour whose luminance differs clearly from ``c`` (survives colour casts)."""
    lum = 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]
    best, best_d = c, -1.0
    for _ in range(12):
        c2 = _colour(rng)
        d = abs(lum - (0.299 * c2[0] + 0.587 * c2[1] + 0.114 * c2[2]))
        if d >= min_dl:
            return c2
        if d > best_d:
            best, best_d = c2, d
    return best


def sample_appearance(rng: np.random.Generator, seed_key: tuple[int, ...] = ()) -> Appearance:
    """Draw one identity's persistent appearance."""
    skin_i = rng.uniform(0, len(_SKIN_TONES) - 1)
    lo = int(skin_i)
    t = skin_i - lo
    skin = (1 - t) * _SKIN_TONES[lo] + t * _SKIN_TONES[min(lo + 1, len(_SKIN_TONES) - 1)]
    hair = _HAIR_COLOURS[rng.integers(len(_HAIR_COLOURS))]
    upper = _colour(rng)
    lower = _colour(rng, achromatic_p=0.5)
    accessory = str(rng.choice(ACCESSORIES, p=[0.35, 0.25, 0.25, 0.15]))
    return Appearance(
        seed_key=tuple(int(k) for k in seed_key),
        skin=tuple(round(float(x), 4) for x in skin),
        hair=tuple(round(float(x), 4) for x in hair),
        hair_style=str(rng.choice(HAIR_STYLES, p=[0.35, 0.25, 0.1, 0.12, 0.18])),
        hat=_colour(rng),
        upper=upper,
        upper2=_contrasting(rng, upper),
        upper_pattern=str(rng.choice(UPPER_PATTERNS, p=[0.25, 0.2, 0.15, 0.12, 0.14, 0.14])),
        stripe_count=int(rng.integers(3, 8)),
        long_sleeves=bool(rng.random() < 0.55),
        coat=bool(rng.random() < 0.2),
        logo=str(rng.choice(["none", "rect", "disc", "bar"], p=[0.55, 0.15, 0.15, 0.15])),
        logo_colour=_contrasting(rng, upper, 0.35),
        lower=lower,
        lower2=_contrasting(rng, lower),
        lower_type=str(rng.choice(LOWER_TYPES, p=[0.6, 0.2, 0.2])),
        lower_stripe=bool(rng.random() < 0.2),
        shoes=_colour(rng, achromatic_p=0.7),
        accessory=accessory,
        accessory_colour=_colour(rng),
        accessory_side=str(rng.choice(["L", "R"])),
        height=round(float(rng.uniform(0.86, 1.0)), 4),
        build=round(float(rng.uniform(0.78, 1.3)), 4),
        leg=round(float(rng.uniform(0.42, 0.53)), 4),
        head=round(float(rng.uniform(0.115, 0.15)), 4),
    )


def identity_appearance(config: SynthConfig, domain: int, pid: int) -> Appearance:
    """The appearance of identity ``pid`` (train or test) of domain index ``domain``."""
    key = (config.seed, _TAG_IDENTITY, domain, pid)
    return sample_appearance(_rng(*key), key)


# --------------------------------------------------------------------------- cameras

_NEUTRAL = {
    "gain": 1.0, "cast": (1.0, 1.0, 1.0), "saturation": 1.0, "contrast": 1.0,
    "haze": 0.0, "gamma": 1.0, "lowres": 1.0, "noise": 0.01,
}

# Hand-designed styles for the first four domains (strong, qualitatively different
# shifts, like Market-1501 vs MSMT17); later domains draw a random style.
_PRESETS = [
    {  # A: bright, warm, sunny
        "gain": 1.3, "cast": (1.14, 1.0, 0.76), "saturation": 1.1, "contrast": 1.05,
        "haze": 0.05, "haze_colour": (1.0, 0.9, 0.7), "gamma": 0.8, "lowres": 1.0,
        "noise": 0.01, "bg_hue": (0.05, 0.14), "bg_sat": (0.2, 0.5), "bg_val": (0.55, 0.9),
    },
    {  # B: dark, blue, night / indoor
        "gain": 0.55, "cast": (0.72, 0.92, 1.35), "saturation": 0.75, "contrast": 1.0,
        "haze": 0.0, "haze_colour": (0.2, 0.25, 0.4), "gamma": 1.3, "lowres": 1.3,
        "noise": 0.035, "bg_hue": (0.55, 0.7), "bg_sat": (0.1, 0.4), "bg_val": (0.12, 0.45),
    },
    {  # C: hazy, low contrast, blurry and noisy
        "gain": 0.95, "cast": (1.0, 1.03, 1.0), "saturation": 0.45, "contrast": 0.6,
        "haze": 0.3, "haze_colour": (0.7, 0.72, 0.7), "gamma": 1.0, "lowres": 2.0,
        "noise": 0.06, "bg_hue": (0.15, 0.4), "bg_sat": (0.0, 0.25), "bg_val": (0.3, 0.7),
    },
    {  # D: vivid, high saturation and contrast, greenish
        "gain": 1.05, "cast": (0.9, 1.08, 0.98), "saturation": 1.9, "contrast": 1.3,
        "haze": 0.0, "haze_colour": (0.5, 0.5, 0.5), "gamma": 1.1, "lowres": 1.0,
        "noise": 0.008, "bg_hue": (0.0, 1.0), "bg_sat": (0.5, 0.9), "bg_val": (0.3, 0.85),
    },
]


def domain_preset(config: SynthConfig, domain: int) -> dict:
    """The centre of domain ``domain``'s camera-style distribution."""
    if domain < len(_PRESETS):
        return dict(_PRESETS[domain])
    rng = _rng(config.seed, _TAG_DOMAIN, domain)
    h0 = float(rng.random())
    return {
        "gain": float(np.exp(rng.uniform(-0.6, 0.3))),
        "cast": tuple(float(np.exp(x)) for x in rng.uniform(-0.3, 0.3, 3)),
        "saturation": float(np.exp(rng.uniform(-0.8, 0.6))),
        "contrast": float(np.exp(rng.uniform(-0.5, 0.25))),
        "haze": float(rng.uniform(0.0, 0.3)),
        "haze_colour": tuple(float(x) for x in rng.uniform(0.3, 0.9, 3)),
        "gamma": float(np.exp(rng.uniform(-0.25, 0.3))),
        "lowres": float(rng.uniform(1.0, 2.0)),
        "noise": float(rng.uniform(0.005, 0.06)),
        "bg_hue": (h0, h0 + float(rng.uniform(0.05, 0.5))),
        "bg_sat": (0.1, float(rng.uniform(0.2, 0.8))),
        "bg_val": (0.2, float(rng.uniform(0.4, 0.9))),
    }


@dataclass(eq=False)
class CameraStyle:
    """One camera: image formation parameters plus its background scene."""

    gain: float
    cast: np.ndarray  # (3,)
    saturation: float
    contrast: float
    haze: float
    haze_colour: np.ndarray  # (3,)
    gamma: float
    lowres: float
    noise: float
    view_probs: np.ndarray  # P(front, back, left, right)
    scale: float  # mean person height / image height
    light: np.ndarray = field(repr=False)  # (H, W, 1) illumination map
    scene: np.ndarray = field(repr=False)  # (H, Ws, 3) background panorama
    clutter: np.ndarray = field(repr=False)  # (3,) occluder colour
    gamma_lut: np.ndarray = field(repr=False)  # (256,) uint8


def _hsv(h: float, s: float, v: float) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb(h % 1.0, min(max(s, 0), 1), min(max(v, 0), 1)), np.float32)


def _make_scene(rng: np.random.Generator, preset: dict, shift: float, h: int, w: int) -> np.ndarray:
    """A background panorama: wall / sky above a horizon, floor / road below."""
    ws = 3 * w
    neutral = {"bg_hue": (0.0, 1.0), "bg_sat": (0.0, 0.3), "bg_val": (0.3, 0.75)}

    def draw(key: str) -> float:
        lo, hi = preset[key]
        nlo, nhi = neutral[key]
        a = shift if shift <= 1 else 1.0
        return float(rng.uniform(nlo + a * (lo - nlo), nhi + a * (hi - nhi)))

    def colour() -> np.ndarray:
        return _hsv(draw("bg_hue"), draw("bg_sat"), draw("bg_val"))

    ys = np.arange(h, dtype=np.float32)[:, None]
    xs = np.arange(ws, dtype=np.float32)[None, :]
    horizon = int(h * rng.uniform(0.45, 0.75))
    scene = np.empty((h, ws, 3), np.float32)
    wall, wall2, floor, floor2 = colour(), colour(), colour(), colour()
    # wall: vertical panels / windows / smooth gradient
    kind = rng.integers(3)
    if kind == 0:
        period = rng.uniform(6, 22) * w / 64
        m = (np.floor(xs / period) % 2 == 0) & (ys < horizon)
    elif kind == 1:
        px, py = rng.uniform(8, 20) * w / 64, rng.uniform(8, 24) * h / 128
        m = ((xs % px) < px * 0.55) & ((ys % py) < py * 0.6) & (ys < horizon - 2)
    else:
        m = np.zeros((h, ws), bool)
    grad = (1.0 + 0.25 * (ys / h - 0.5)).astype(np.float32)[..., None]
    scene[:] = wall * grad
    scene[np.broadcast_to(m, (h, ws))] = wall2
    # floor: tiles / crosswalk stripes / plain
    fy = ys >= horizon
    kind = rng.integers(3)
    scene[np.broadcast_to(fy, (h, ws))] = floor
    if kind == 0:
        p = rng.uniform(6, 16) * w / 64
        fm = fy & (((xs % p) < 1.2) | ((ys % (p * 0.6)) < 1.2))
    elif kind == 1:
        p = rng.uniform(8, 18) * w / 64
        fm = fy & ((np.floor((xs + 0.6 * ys) / p) % 2) == 0)
    else:
        fm = fy & (rng.random((h, ws)) < 0.0)
    scene[np.broadcast_to(fm, (h, ws))] = floor2
    # a few blobs: bushes, bins, signs
    for _ in range(int(rng.integers(2, 6))):
        cx, cy = rng.uniform(0, ws), rng.uniform(0, h)
        rx, ry = rng.uniform(3, 12) * w / 64, rng.uniform(4, 18) * h / 128
        bm = ((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 < 1
        scene[bm] = colour()
    scene += rng.normal(0, 0.02, scene.shape).astype(np.float32)
    return np.clip(scene, 0, 1)


def camera_style(config: SynthConfig, domain: int, cam: int) -> CameraStyle:
    """Camera ``cam`` (0-based) of domain ``domain``: deterministic in the config."""
    rng = _rng(config.seed, _TAG_CAMERA, domain, cam)
    p = domain_preset(config, domain)
    s = config.domain_shift
    j = config.camera_jitter
    h, w = config.height, config.width

    def logmix(key: str, sd: float) -> float:
        return float(np.exp(s * np.log(p[key] / _NEUTRAL[key]) + j * rng.normal(0, sd)))

    gain = logmix("gain", 0.12)
    cast = np.exp(s * np.log(np.asarray(p["cast"]) / 1.0) + j * rng.normal(0, 0.06, 3))
    saturation = logmix("saturation", 0.12)
    contrast = logmix("contrast", 0.08)
    gamma = logmix("gamma", 0.08)
    haze = float(np.clip(s * p["haze"] + j * rng.normal(0, 0.04), 0, 0.8))
    lowres = float(max(1.0, 1.0 + s * (p["lowres"] - 1.0) + j * rng.normal(0, 0.15)))
    noise = float(max(0.0, _NEUTRAL["noise"] + s * (p["noise"] - _NEUTRAL["noise"])
                      + j * abs(rng.normal(0, 0.006))))
    view_probs = rng.dirichlet([1.5, 1.5, 1.0, 1.0])
    scale = float(rng.uniform(0.78, 0.92))
    # illumination map: directional gradient plus a soft spot
    ys = np.linspace(-0.5, 0.5, h, dtype=np.float32)[:, None]
    xs = np.linspace(-0.5, 0.5, w, dtype=np.float32)[None, :]
    gx, gy = rng.normal(0, 0.25 * j), rng.normal(0, 0.2 * j)
    light = (1 + gx * xs) * (1 + gy * ys)
    light = (gain * np.clip(light, 0.5, 1.5)).astype(np.float32)[..., None]
    gamma_lut = (np.clip(np.linspace(0, 1, 256) ** gamma, 0, 1) * 255 + 0.5).astype(np.uint8)
    return CameraStyle(
        gain=gain, cast=cast.astype(np.float32), saturation=saturation, contrast=contrast,
        haze=haze, haze_colour=np.asarray(p["haze_colour"], np.float32), gamma=gamma,
        lowres=lowres, noise=noise, view_probs=view_probs, scale=scale, light=light,
        scene=_make_scene(rng, p, s, h, w), clutter=_hsv(rng.random(), rng.uniform(0, 0.6),
                                                          rng.uniform(0.1, 0.8)),
        gamma_lut=gamma_lut,
    )


# --------------------------------------------------------------------------- pose


@dataclass(frozen=True)
class Pose:
    """Per-image geometry: viewpoint, walk phase, framing and occlusion."""

    view: str  # "front" | "back" | "left" | "right"
    phase: float  # walk cycle angle (radians)
    stride: float  # swing amplitude
    scale: float  # person height / image height (before the body-height factor)
    dx: float  # horizontal offset, fraction of the width
    dy: float  # vertical offset, fraction of the height
    bg_offset: float  # where in the camera's panorama the crop starts (0..1)
    occluder: str  # "none" | "pole" | "box" | "edge"
    occ_pos: float
    occ_size: float
    brightness: float  # per-image illumination jitter


_VIEWS = ("front", "back", "left", "right")


def sample_pose(cam: CameraStyle, rng: np.random.Generator, occlusion_prob: float = 0.2) -> Pose:
    view = _VIEWS[int(rng.choice(4, p=cam.view_probs))]
    occ = "none"
    if rng.random() < occlusion_prob:
        occ = str(rng.choice(["pole", "box", "edge"], p=[0.4, 0.4, 0.2]))
    return Pose(
        view=view,
        phase=float(rng.uniform(0, 2 * math.pi)),
        stride=float(rng.uniform(0.15, 0.45)),
        scale=float(cam.scale * rng.uniform(0.93, 1.07)),
        dx=float(rng.normal(0, 0.06)),
        dy=float(rng.normal(0, 0.03)),
        bg_offset=float(rng.random()),
        occluder=occ,
        occ_pos=float(rng.random()),
        occ_size=float(rng.uniform(0.2, 0.45)),
        brightness=float(np.exp(rng.normal(0, 0.08))),
    )


# --------------------------------------------------------------------------- drawing

# Part labels of the person mask.
_BG, _SKIN, _HAIR, _UPPER, _LOWER, _SHOES, _BAG, _STRAP, _LOGO, _HAT, _LOWER2 = range(11)


def _limb(draw: ImageDraw.ImageDraw, p0, p1, w0: float, w1: float, label: int) -> None:
    """A tapered quad from p0 (half-width w0) to p1 (half-width w1)."""
    dx, dy = p1[0] - p0[0], p1[1] - p0[1]
    n = math.hypot(dx, dy) or 1.0
    nx, ny = -dy / n, dx / n
    draw.polygon(
        [(p0[0] + nx * w0, p0[1] + ny * w0), (p1[0] + nx * w1, p1[1] + ny * w1),
         (p1[0] - nx * w1, p1[1] - ny * w1), (p0[0] - nx * w0, p0[1] - ny * w0)],
        fill=label,
    )


def _ellipse(draw: ImageDraw.ImageDraw, cx, cy, rx, ry, label: int) -> None:
    draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=label)


class _Body:
    """Key points of the body in image coordinates (person facing right if a side view)."""

    def __init__(self, a: Appearance, pose: Pose, h: int, w: int):
        ph = h * pose.scale * a.height
        self.ph = ph
        self.cx = w / 2 + pose.dx * w
        foot = (h + ph) / 2 + pose.dy * h
        self.foot = min(foot, h + 0.02 * ph)
        self.top = self.foot - ph
        self.head_h = a.head * ph
        self.neck = self.top + self.head_h
        self.shoulder = self.neck + 0.02 * ph
        self.hip = self.foot - a.leg * ph
        side = pose.view in ("left", "right")
        self.sw = 0.105 * ph * a.build * (0.62 if side else 1.0)  # torso half-width
        self.hw = self.sw * (0.85 if not side else 1.05)  # hip half-width
        self.lw = 0.045 * ph * a.build  # leg half-width
        self.aw = 0.028 * ph * a.build  # arm half-width
        self.arm_len = 0.34 * ph
        self.side = side


def _draw_labels(a: Appearance, pose: Pose, h: int, w: int) -> tuple[np.ndarray, _Body]:
    """Rasterise the person into a part-label map (view "left" is drawn as "right")."""
    b = _Body(a, pose, h, w)
    img = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(img)
    ph, cx = b.ph, b.cx
    swing = pose.stride * math.sin(pose.phase)
    view = pose.view
    side = b.side
    # which side of the image the person's left is on (front: image right)
    left_dir = {"front": 1, "back": -1}.get(view, 0)
    knee = b.hip + 0.5 * (b.foot - b.hip)
    lower_cover = {"trousers": b.foot - 0.03 * ph, "shorts": knee - 0.02 * ph,
                   "skirt": knee + 0.03 * ph}[a.lower_type]
    hem = b.hip + (0.22 * ph if a.coat else 0.04 * ph)
    near_bag = (a.accessory_side == "R") if view == "right" else (a.accessory_side == "L")
    acc = a.accessory
    bag_col_side = left_dir if a.accessory_side == "L" else -left_dir

    # ---- things behind the body
    if side and acc == "backpack":
        d.rectangle([cx - b.sw - 0.09 * ph, b.shoulder + 0.03 * ph, cx - b.sw + 2,
                     b.shoulder + 0.26 * ph], fill=_BAG)
    if side and acc in ("shoulder_bag", "handbag") and not near_bag:
        by = b.hip - 0.02 * ph if acc == "shoulder_bag" else b.hip + 0.08 * ph
        d.rectangle([cx - 0.09 * ph, by, cx + 0.02 * ph, by + 0.09 * ph], fill=_BAG)
    if a.hair_style == "long" and view == "front":
        d.rectangle([cx - b.head_h * 0.45, b.top + b.head_h * 0.3, cx + b.head_h * 0.45,
                     b.shoulder + 0.07 * ph], fill=_HAIR)

    # ---- legs
    def leg(x_hip: float, ang: float, lift: float, label_top: int) -> None:
        length = b.foot - b.hip - lift
        x_foot = x_hip + math.sin(ang) * length
        y_foot = b.hip + math.cos(ang) * length
        _limb(d, (x_hip, b.hip), (x_foot, y_foot), b.lw * 1.1, b.lw * 0.8, _SKIN)
        # trousers / shorts cover the leg down to ``lower_cover``
        frac = min(1.0, (lower_cover - b.hip) / max(length, 1))
        xc = x_hip + (x_foot - x_hip) * frac
        yc = b.hip + (y_foot - b.hip) * frac
        _limb(d, (x_hip, b.hip - 1), (xc, yc), b.lw * 1.15, b.lw * (0.85 + 0.25 * (1 - frac)),
              label_top)
        fx = 0.045 * ph if side else 0.02 * ph
        d.rectangle([x_foot - 0.02 * ph, y_foot - 0.03 * ph, x_foot + fx, y_foot + 0.005 * ph],
                    fill=_SHOES)

    if side:
        leg(cx, -swing, 0.0, _LOWER)  # far leg
    else:
        lift = 0.03 * ph * max(0.0, math.sin(pose.phase))
        lift2 = 0.03 * ph * max(0.0, -math.sin(pose.phase))
        leg(cx - b.hw * 0.5, -0.04, lift, _LOWER)
        leg(cx + b.hw * 0.5, 0.04, lift2, _LOWER)
    if side:
        leg(cx, swing, 0.0, _LOWER)  # near leg
    # crotch / skirt
    if a.lower_type == "skirt":
        d.polygon([(cx - b.hw, b.hip - 2), (cx + b.hw, b.hip - 2),
                   (cx + b.hw * 1.45, lower_cover), (cx - b.hw * 1.45, lower_cover)], fill=_LOWER)
    else:
        d.polygon([(cx - b.hw, b.hip - 2), (cx + b.hw, b.hip - 2), (cx + b.hw * 0.3, b.hip + 0.07 * ph),
                   (cx - b.hw * 0.3, b.hip + 0.07 * ph)], fill=_LOWER)

    # ---- arms (far arm behind the torso in side views)
    def arm(x_sh: float, ang: float, label_hand: int = _SKIN) -> None:
        y_sh = b.shoulder + 0.01 * ph
        xe = x_sh + math.sin(ang) * b.arm_len
        ye = y_sh + math.cos(ang) * b.arm_len
        _limb(d, (x_sh, y_sh), (xe, ye), b.aw * 1.1, b.aw * 0.8, _SKIN)
        sl = 0.85 if a.long_sleeves else 0.35
        _limb(d, (x_sh, y_sh - 1), (x_sh + (xe - x_sh) * sl, y_sh + (ye - y_sh) * sl),
              b.aw * 1.25, b.aw * 1.05, _UPPER)
        _ellipse(d, xe, ye, b.aw * 0.9, b.aw * 1.1, label_hand)

    if side:
        arm(cx, 0.9 * swing)

    # ---- torso (upper garment), trapezoid shoulder -> hem
    d.polygon([(cx - b.sw, b.shoulder), (cx + b.sw, b.shoulder),
               (cx + b.hw * (1.15 if a.coat else 1.0), hem),
               (cx - b.hw * (1.15 if a.coat else 1.0), hem)], fill=_UPPER)
    _ellipse(d, cx - b.sw + b.aw, b.shoulder + b.aw * 0.6, b.aw * 1.3, b.aw * 1.0, _UPPER)
    _ellipse(d, cx + b.sw - b.aw, b.shoulder + b.aw * 0.6, b.aw * 1.3, b.aw * 1.0, _UPPER)

    # ---- accessories on / in front of the torso
    if acc == "backpack":
        if view == "back":
            d.rectangle([cx - b.sw * 0.8, b.shoulder + 0.03 * ph, cx + b.sw * 0.8,
                         b.shoulder + 0.25 * ph], fill=_BAG)
        elif view == "front":
            for sx in (-1, 1):
                d.rectangle([cx + sx * b.sw * 0.55 - 0.012 * ph, b.shoulder,
                             cx + sx * b.sw * 0.55 + 0.012 * ph, b.shoulder + 0.16 * ph], fill=_STRAP)
        else:
            d.line([(cx - b.sw * 0.5, b.shoulder), (cx - b.sw * 0.2, b.shoulder + 0.15 * ph)],
                   fill=_STRAP, width=max(1, int(0.02 * ph)))
    if acc == "shoulder_bag" and not side:
        sx = bag_col_side
        d.line([(cx - sx * b.sw * 0.8, b.shoulder), (cx + sx * b.sw * 1.05, b.hip - 0.02 * ph)],
               fill=_STRAP, width=max(1, int(0.022 * ph)))
        d.rectangle([cx + sx * b.sw * 1.05 - 0.06 * ph, b.hip - 0.05 * ph,
                     cx + sx * b.sw * 1.05 + 0.06 * ph, b.hip + 0.05 * ph], fill=_BAG)
    if acc == "shoulder_bag" and side and near_bag:
        d.line([(cx + b.sw * 0.3, b.shoulder), (cx - b.sw * 0.2, b.hip - 0.03 * ph)],
               fill=_STRAP, width=max(1, int(0.022 * ph)))
        d.rectangle([cx - 0.08 * ph, b.hip - 0.05 * ph, cx + 0.04 * ph, b.hip + 0.05 * ph],
                    fill=_BAG)

    # logo on the chest (front) or a print on the back
    if a.logo != "none" and view in ("front", "back") and not (view == "back" and acc == "backpack"):
        ly = b.shoulder + 0.09 * ph
        r = 0.05 * ph * (1.0 if view == "front" else 1.3)
        if a.logo == "rect":
            d.rectangle([cx - r, ly - r * 0.7, cx + r, ly + r * 0.7], fill=_LOGO)
        elif a.logo == "disc":
            _ellipse(d, cx, ly, r, r, _LOGO)
        else:
            d.rectangle([cx - b.sw * 0.9, ly - r * 0.35, cx + b.sw * 0.9, ly + r * 0.35], fill=_LOGO)

    # ---- arms in front (front/back views) or near arm (side)
    if side:
        arm(cx, -0.9 * swing)
        if acc == "handbag" and near_bag:
            xe = cx + math.sin(-0.9 * swing) * b.arm_len
            ye = b.shoulder + math.cos(-0.9 * swing) * b.arm_len
            d.rectangle([xe - 0.035 * ph, ye, xe + 0.035 * ph, ye + 0.08 * ph], fill=_BAG)
    else:
        sway = 0.08 + 0.06 * math.sin(pose.phase)
        arm(cx - b.sw, sway)
        arm(cx + b.sw, -sway)
        if acc == "handbag":
            sx = bag_col_side
            xe = cx + sx * (b.sw + math.sin(0.08) * b.arm_len)
            ye = b.shoulder + b.arm_len
            d.rectangle([xe - 0.035 * ph, ye, xe + 0.035 * ph, ye + 0.08 * ph], fill=_BAG)

    # ---- head and hair
    hx, hy = cx + (0.01 * ph if side else 0.0), b.top + b.head_h * 0.5
    hr_x, hr_y = b.head_h * (0.36 if side else 0.38), b.head_h * 0.5
    d.rectangle([cx - hr_x * 0.45, hy, cx + hr_x * 0.45, b.shoulder + 1], fill=_SKIN)  # neck
    style = a.hair_style
    if view == "back" and style != "bald":
        _ellipse(d, hx, hy, hr_x * 1.05, hr_y * 1.02, _HAIR)
        if style == "long":
            d.rectangle([hx - hr_x, hy, hx + hr_x, b.shoulder + 0.1 * ph], fill=_HAIR)
        if style == "bun":
            _ellipse(d, hx, b.top + hr_y * 0.6, hr_x * 0.45, hr_y * 0.35, _HAIR)
    else:
        _ellipse(d, hx, hy, hr_x, hr_y, _SKIN)
        if style != "bald":
            # hair cap: top of the head (and the back half in side views)
            d.chord([hx - hr_x * 1.08, b.top - 1, hx + hr_x * 1.08, b.top + b.head_h * 0.95],
                    180, 360, fill=_HAIR)
            if side:
                d.chord([hx - hr_x * 1.05, b.top, hx + hr_x * 0.9, b.top + b.head_h],
                        90, 270, fill=_HAIR)
                _ellipse(d, hx + hr_x * 0.35, hy + hr_y * 0.1, hr_x * 0.55, hr_y * 0.6, _SKIN)
                if style == "long":
                    d.rectangle([hx - hr_x * 1.05, hy, hx - hr_x * 0.2, b.shoulder + 0.08 * ph],
                                fill=_HAIR)
                if style == "bun":
                    _ellipse(d, hx - hr_x * 1.0, hy - hr_y * 0.3, hr_x * 0.4, hr_y * 0.35, _HAIR)
        if style == "bald":
            d.chord([hx - hr_x * 1.0, b.top, hx + hr_x * 1.0, b.top + b.head_h * 0.5],
                    180, 360, fill=_HAIR)
    if style == "hat":
        d.chord([hx - hr_x * 1.1, b.top - 0.02 * ph, hx + hr_x * 1.1, b.top + b.head_h * 0.9],
                180, 360, fill=_HAT)
        brim = 0.05 * ph if side else 0.02 * ph
        d.rectangle([hx - hr_x * 1.15, b.top + b.head_h * 0.38,
                     hx + hr_x * 1.15 + brim, b.top + b.head_h * 0.48], fill=_HAT)
    return np.asarray(img), b


def _colourise(a: Appearance, pose: Pose, labels: np.ndarray, b: _Body) -> np.ndarray:
    """Turn a part-label map into float RGB, with clothing patterns and shading."""
    h, w = labels.shape
    pal = np.zeros((11, 3), np.float32)
    pal[_SKIN], pal[_HAIR], pal[_UPPER] = a.skin, a.hair, a.upper
    pal[_LOWER], pal[_SHOES], pal[_BAG] = a.lower, a.shoes, a.accessory_colour
    pal[_STRAP] = np.asarray(a.accessory_colour) * 0.6
    pal[_LOGO], pal[_HAT], pal[_LOWER2] = a.logo_colour, a.hat, a.lower2
    img = pal[labels]
    upper = labels == _UPPER
    pat = a.upper_pattern
    if pat != "solid" and upper.any():
        ys = np.arange(h, dtype=np.float32)[:, None]
        xs = np.arange(w, dtype=np.float32)[None, :]
        torso = max(b.hip - b.shoulder, 1.0)
        v = (ys - b.shoulder) / torso
        u = (xs - b.cx) / max(b.sw, 1.0)
        n = a.stripe_count
        if pat == "hstripes":
            m = (np.floor(v * n) % 2) == 1
        elif pat == "vstripes":
            m = (np.floor(u * n * 0.5 + 100) % 2) == 1
        elif pat == "checks":
            m = ((np.floor(v * n) + np.floor(u * n * 0.5 + 100)) % 2) == 1
        elif pat == "block":
            m = v > 0.45
        else:  # band
            m = np.abs(v - 0.35) < 0.13
        m = np.broadcast_to(m, (h, w)) & upper
        img[m] = a.upper2
    if a.lower_stripe and not b.side:
        xs = np.arange(w, dtype=np.float32)[None, :]
        m = (np.abs(np.abs(xs - b.cx) - b.hw * 0.5 - b.lw * 0.8) < max(0.6, b.lw * 0.35))
        m = np.broadcast_to(m, (h, w)) & (labels == _LOWER)
        img[m] = a.lower2
    # cylindrical shading across the body
    xs = np.arange(w, dtype=np.float32)
    shade = 1.0 - 0.35 * np.clip(((xs - b.cx) / (b.sw * 1.6 + 1)) ** 2, 0, 1)
    img *= shade[None, :, None]
    return img


def render_person(
    appearance: Appearance,
    pose: Pose,
    camera: CameraStyle,
    height: int,
    width: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Render one pedestrian crop as it would come out of ``camera``: (H, W, 3) uint8."""
    h, w = height, width
    labels, body = _draw_labels(appearance, pose, h, w)
    person = _colourise(appearance, pose, labels, body)
    mask = labels > 0
    if pose.view == "left":
        person, mask = person[:, ::-1], mask[:, ::-1]
    # background: crop of the camera's panorama
    ws = camera.scene.shape[1]
    off = int(pose.bg_offset * (ws - w))
    img = camera.scene[:, off:off + w] * np.float32(pose.brightness)
    img = np.where(mask[..., None], person, img)
    # occluders
    if pose.occluder == "pole":
        x0 = int(pose.occ_pos * w)
        pw = max(1, int(pose.occ_size * 0.25 * w))
        img[:, x0:x0 + pw] = camera.clutter
    elif pose.occluder == "box":
        hb = int(pose.occ_size * h)
        x0 = int((pose.occ_pos - 0.5) * w)
        img[h - hb:, max(0, x0):max(0, x0 + int(0.9 * w))] = camera.clutter
    elif pose.occluder == "edge":
        ew = int(pose.occ_size * 0.6 * w)
        if pose.occ_pos < 0.5:
            img[:, :ew] = camera.clutter * 0.8
        else:
            img[:, w - ew:] = camera.clutter * 0.8
    return _apply_camera(img, camera, rng)


def _apply_camera(img: np.ndarray, cam: CameraStyle, rng: np.random.Generator) -> np.ndarray:
    h, w = img.shape[:2]
    img = img * cam.light * cam.cast
    if cam.saturation != 1.0:
        lum = (img @ _LUMA)[..., None]
        img = lum + cam.saturation * (img - lum)
    if cam.haze > 0:
        img = (1 - cam.haze) * img + cam.haze * cam.haze_colour
    if cam.contrast != 1.0:
        img = (img - 0.5) * cam.contrast + 0.5
    q = cam.gamma_lut[(np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)]
    if cam.lowres > 1.05:
        pil = Image.fromarray(q)
        small = (max(2, round(w / cam.lowres)), max(2, round(h / cam.lowres)))
        q = np.asarray(pil.resize(small, Image.BILINEAR).resize((w, h), Image.BILINEAR))
    if cam.noise > 0:
        noisy = q + rng.normal(0, cam.noise * 255, q.shape).astype(np.float32)
        q = np.clip(noisy + 0.5, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(q)


# --------------------------------------------------------------------------- dataset plan


@dataclass
class _Item:
    split: str
    filename: str
    kind: str  # "id" | "distractor" | "junk"
    pid: int
    cam: int  # 0-based
    key: tuple[int, ...]


def _plan_domain(config: SynthConfig, d: int) -> list[_Item]:
    """Every file of domain ``d``: which split, name, identity, camera and seed key."""
    rng = _rng(config.seed, _TAG_SPLIT, d)
    ncam = config.cams_per_domain
    frame = [0] * ncam
    items: list[_Item] = []

    def name(pid: int, cam: int) -> str:
        frame[cam] += 1
        fr = frame[cam] * 5 + cam
        return f"{pid:04d}_c{cam + 1}s1_{fr:06d}_01.jpg" if pid >= 0 else \
            f"-1_c{cam + 1}s1_{fr:06d}_01.jpg"

    n_train, n_test = config.ids_per_domain, config.test_ids_per_domain
    m = config.images_per_id_per_cam
    for pid in range(1, n_train + n_test + 1):
        k = int(rng.integers(config.min_cams_per_id, ncam + 1))
        cams = sorted(int(c) for c in rng.choice(ncam, size=k, replace=False))
        if pid <= n_train:
            for c in cams:
                for i in range(m):
                    items.append(_Item("bounding_box_train", name(pid, c), "id", pid, c,
                                       (d, pid, c, i)))
        else:
            nq = int(rng.integers(1, min(config.max_query_cams, k - 1) + 1))
            qcams = sorted(int(c) for c in rng.choice(cams, size=nq, replace=False))
            for c in qcams:
                items.append(_Item("query", name(pid, c), "id", pid, c, (d, pid, c, m)))
            for c in cams:
                for i in range(m):
                    items.append(_Item("bounding_box_test", name(pid, c), "id", pid, c,
                                       (d, pid, c, i)))
    for j in range(config.distractors):
        c = int(rng.integers(ncam))
        items.append(_Item("bounding_box_test", name(0, c), "distractor", 0, c, (d, j)))
    for j in range(config.junk):
        c = int(rng.integers(ncam))
        items.append(_Item("bounding_box_test", name(-1, c), "junk", -1, c, (d, j)))
    return items


def _render_item(config: SynthConfig, d: int, it: _Item, cams: list[CameraStyle],
                 apps: dict[int, Appearance]) -> np.ndarray:
    h, w = config.height, config.width
    cam = cams[it.cam]
    if it.kind == "id":
        rng = _rng(config.seed, _TAG_IMAGE, *it.key)
        pose = sample_pose(cam, rng, config.occlusion_prob)
        return render_person(apps[it.pid], pose, cam, h, w, rng)
    if it.kind == "distractor":
        # a stranger, badly framed (too close / cut off), like a poor detection
        rng = _rng(config.seed, _TAG_DISTRACTOR, *it.key)
        app = sample_appearance(rng, (config.seed, _TAG_DISTRACTOR, *it.key))
        pose = sample_pose(cam, rng, config.occlusion_prob)
        if rng.random() < 0.7:
            pose = replace(pose, scale=pose.scale * float(rng.uniform(1.2, 1.9)),
                           dy=float(rng.uniform(0.1, 0.4)), dx=float(rng.normal(0, 0.2)))
        return render_person(app, pose, cam, h, w, rng)
    # junk: background only, or a tiny far-away figure
    rng = _rng(config.seed, _TAG_JUNK, *it.key)
    app = sample_appearance(rng, (config.seed, _TAG_JUNK, *it.key))
    pose = replace(sample_pose(cam, rng, 0.0), scale=float(rng.uniform(0.05, 0.3)),
                   dx=float(rng.uniform(-0.4, 0.4)))
    return render_person(app, pose, cam, h, w, rng)


# --------------------------------------------------------------------------- writing


def _save_jpeg(arr: np.ndarray, path: Path, quality: int) -> None:
    """Write one JPEG (no metadata, fixed settings: same pixels -> same bytes)."""
    Image.fromarray(arr).save(path, format="JPEG", quality=quality, optimize=False,
                              subsampling=2)


def _count(items: list[_Item]) -> dict:
    out = {}
    for split in SPLITS:
        its = [i for i in items if i.split == split]
        out[split] = {
            "images": len(its),
            "ids": len({i.pid for i in its if i.kind == "id"}),
            "distractors": sum(i.kind == "distractor" for i in its),
            "junk": sum(i.kind == "junk" for i in its),
        }
    return out


def _is_nonempty_dir(p: Path) -> bool:
    return p.is_dir() and any(p.iterdir())


def generate_synthetic(
    out_dir: str | os.PathLike,
    config: SynthConfig | None = None,
    *,
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """Render the synthetic federation into ``out_dir`` (Market-1501 layout per domain).

    Writes ``out_dir/<domain>/{bounding_box_train,query,bounding_box_test}/*.jpg`` and
    ``out_dir/manifest.json``.  Deterministic for a config; atomic (see
    :func:`write_atomically`).  Raises :class:`~privreid.errors.DataError` if
    ``out_dir`` exists and is not empty, unless ``overwrite`` is true.
    """
    config = config or SynthConfig()
    config.validate()
    return write_atomically(out_dir, lambda tmp: _write_federation(tmp, config, progress), overwrite=overwrite)


def _write_federation(tmp: Path, config: SynthConfig, progress: bool) -> None:
    names = domain_names(config)
    plans = [_plan_domain(config, d) for d in range(config.num_domains)]
    total = sum(len(p) for p in plans)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="synthetic", unit="img")
    counts = {}
    for d, (dname, items) in enumerate(zip(names, plans)):
        for split in SPLITS:
            (tmp / dname / split).mkdir(parents=True)
        cams = [camera_style(config, d, c) for c in range(config.cams_per_domain)]
        apps = {pid: identity_appearance(config, d, pid)
                for pid in {i.pid for i in items if i.kind == "id"}}
        for it in items:
            arr = _render_item(config, d, it, cams, apps)
            _save_jpeg(arr, tmp / dname / it.split / it.filename, config.jpeg_quality)
            if bar is not None:
                bar.update(1)
        counts[dname] = _count(items)
    if bar is not None:
        bar.close()
    write_manifest(tmp, "privreid-synthetic", config, domains=names, counts=counts, total_images=total)


def write_manifest(root: Path, fmt: str, config, *, format_version: int = FORMAT_VERSION,
                   render_version: int = RENDER_VERSION, **extra) -> None:
    """Write ``root/manifest.json``: format, versions, the generator config and its hash, plus ``extra``."""
    manifest = {
        "format": fmt,
        "format_version": format_version,
        "render_version": render_version,
        "privreid_version": __version__,
        "config": asdict(config),
        "config_hash": config_hash(config, format_version, render_version),
        **extra,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def write_atomically(out_dir: str | os.PathLike, fill: Callable[[Path], None], *, overwrite: bool = False) -> Path:
    """Run ``fill(tmp)`` on a fresh temporary sibling directory of ``out_dir``, then rename it to ``out_dir``.

    Nothing is left behind if ``fill`` raises.  Raises
    :class:`~privreid.errors.DataError` if ``out_dir`` is a file, or a
    non-empty directory and ``overwrite`` is false.  Returns the absolute path.
    """
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise DataError(f"{out} exists and is not a directory")
    if _is_nonempty_dir(out) and not overwrite:
        raise DataError(f"{out} exists and is not empty (pass --overwrite, overwrite=True, to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        fill(tmp)
        _move_into_place(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _move_into_place(tmp: Path, out: Path, overwrite: bool) -> None:
    if out.exists():
        if _is_nonempty_dir(out):
            if not overwrite:
                raise DataError(f"{out} was filled by someone else while generating")
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, trash / "old")
            try:
                os.replace(tmp, out)
            finally:
                shutil.rmtree(trash, ignore_errors=True)
            return
        out.rmdir()
    os.replace(tmp, out)


def read_manifest(path: str | os.PathLike) -> dict | None:
    """The manifest of a generated directory, or None if missing / unreadable."""
    try:
        return json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _default_cache_root() -> Path:
    env = os.environ.get("PRIVREID_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "privreid"


def ensure_synthetic(
    cache_root: str | os.PathLike | None = None,
    config: SynthConfig | None = None,
    *,
    progress: bool = False,
) -> Path:
    """Return a cached copy of the synthetic federation for ``config``, generating it once.

    The directory is ``cache_root / ("synth-" + config_hash(config))``; the cache root
    defaults to ``$PRIVREID_CACHE`` or ``~/.cache/privreid``.
    """
    config = config or SynthConfig()
    config.validate()
    return ensure_cached(
        "synth", config,
        lambda path, overwrite: generate_synthetic(path, config, progress=progress, overwrite=overwrite),
        cache_root,
    )


def ensure_cached(prefix: str, config, generate: Callable[[Path, bool], Path],
                  cache_root: str | os.PathLike | None = None, *, format_version: int = FORMAT_VERSION,
                  render_version: int = RENDER_VERSION) -> Path:
    """The cache directory ``cache_root / f"{prefix}-{config_hash(...)}"``, filled by ``generate`` once.

    ``generate(path, overwrite)`` writes the dataset (a broken cached copy is
    overwritten).  A copy is valid when its manifest holds the same config and
    versions; a concurrent process that wins the race is accepted.
    """
    root = Path(cache_root).expanduser() if cache_root is not None else _default_cache_root()
    path = root / f"{prefix}-{config_hash(config, format_version, render_version)}"
    expected = json.loads(json.dumps(asdict(config)))  # as the manifest stores it (tuples become lists)

    def valid() -> bool:
        m = read_manifest(path)
        return (m is not None and m.get("config") == expected
                and m.get("format_version") == format_version
                and m.get("render_version") == render_version)

    if valid():
        return path
    try:
        generate(path, path.exists())
    except DataError:
        if valid():  # a concurrent process won the race
            return path
        raise
    return path


# --------------------------------------------------------------------------- extra renders (membership audits)

#: folder of the extra renders of training identities in each domain (:func:`generate_synthetic_extra`)
EXTRA_SPLIT = "audit_extra"


@dataclass(frozen=True)
class SynthExtraConfig:
    """Extra renders of the *training* identities of a synthetic federation (see :func:`generate_synthetic_extra`)."""

    synth: SynthConfig = field(default_factory=SynthConfig)
    #: images per (training identity, camera that sees it)
    per_cam: int = 2


def generate_synthetic_extra(out_dir: str | os.PathLike, config: SynthExtraConfig, *, overwrite: bool = False) -> Path:
    """Render ``per_cam`` new images of every training identity in each of its cameras, never in the train split.

    They are the image-level non-members of a membership audit
    (:mod:`privreid.audit`): same identities, same cameras, same renderer as
    the training images, new poses and noise (seed keys ``(domain, pid, cam,
    images_per_id_per_cam + j)``, which the federation itself never draws for
    a training identity), so members and non-members are exchangeable for a
    model that never trained on them.  Writes
    ``out_dir/<domain>/audit_extra/<pid>_c<cam>s2_<j>_01.jpg`` (original pids,
    as in the train split's file names) and ``manifest.json``.
    """
    config.synth.validate()
    if config.per_cam < 1:
        raise ConfigError(f"SynthExtraConfig: per_cam must be >= 1 (got {config.per_cam})")

    def fill(tmp: Path) -> None:
        s = config.synth
        names = domain_names(s)
        for d, dname in enumerate(names):
            folder = tmp / dname / EXTRA_SPLIT
            folder.mkdir(parents=True)
            train = [it for it in _plan_domain(s, d) if it.split == "bounding_box_train"]
            cams = [camera_style(s, d, c) for c in range(s.cams_per_domain)]
            seen = sorted({(it.pid, it.cam) for it in train})
            apps = {pid: identity_appearance(s, d, pid) for pid, _ in seen}
            for pid, cam in seen:
                for j in range(config.per_cam):
                    key = (d, pid, cam, s.images_per_id_per_cam + j)
                    arr = _render_item(s, d, _Item(EXTRA_SPLIT, "", "id", pid, cam, key), cams, apps)
                    _save_jpeg(arr, folder / f"{pid:04d}_c{cam + 1}s2_{j:06d}_01.jpg", s.jpeg_quality)
        write_manifest(tmp, "privreid-synthetic-extra", config, domains=names)

    return write_atomically(out_dir, fill, overwrite=overwrite)


def ensure_synthetic_extra(config: SynthExtraConfig, cache_root: str | os.PathLike | None = None) -> Path:
    """The cached extra renders for ``config`` (:func:`generate_synthetic_extra`), generated once."""
    return ensure_cached("synth-extra", config,
                         lambda path, overwrite: generate_synthetic_extra(path, config, overwrite=overwrite), cache_root)


def extra_samples(root: str | os.PathLike, domain: str) -> list[tuple[str, int, int]]:
    """``(path, original pid, 0-based camid)`` of the extra renders of ``domain`` under ``root``."""
    folder = Path(root) / domain / EXTRA_SPLIT
    if not folder.is_dir():
        raise DataError(f"no extra renders for domain {domain!r} under {root}")
    out = []
    for path in sorted(folder.glob("*.jpg")):
        pid, cam = path.name.split("_")[:2]
        out.append((str(path), int(pid), int(cam[1:cam.index("s")]) - 1))
    return out
