"""Camera styles of the synthetic federation: per-domain presets, per-camera illumination, colour cast,
contrast, blur, noise and background (:mod:`privreid.data.synthetic`)."""

from __future__ import annotations

import colorsys
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from privreid.data.synthetic_config import _TAG_CAMERA, _TAG_DOMAIN, SynthConfig, _rng

_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


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
