"""Rendering of the synthetic pedestrians: identity appearance, pose and viewpoint, drawing
(:mod:`privreid.data.synthetic`)."""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from privreid.data.synthetic_cameras import CameraStyle, _apply_camera
from privreid.data.synthetic_config import _TAG_IDENTITY, SynthConfig, _rng

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

TEXTURES = ("stripes", "checks", "dots", "print")


@dataclass(frozen=True)
class Texture:
    """A garment's fine print: plane waves in body coordinates, combined by ``kind``.

    Each wave is ``(kx, ky, phase)``: ``cos(2 pi (kx x + ky y) + phase)`` with
    ``x, y`` in units of the person's height, measured from the body centre
    line and the shoulders, so the print moves, scales and sways with the body.
    ``sharpness`` sets how hard its edges are, ``contrast`` how far it pulls
    the garment's colour towards the garment's second colour.
    """

    kind: str
    waves: tuple[tuple[float, float, float], ...]
    sharpness: float
    contrast: float

    def field(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The print's value in [0, 1] at body coordinates ``x``, ``y`` (broadcast)."""
        w = [np.cos(2 * np.pi * (kx * x + ky * y) + ph) for kx, ky, ph in self.waves]
        if self.kind == "stripes":
            v = w[0]
        elif self.kind == "checks":
            v = w[0] * w[1]
        elif self.kind == "dots":
            v = 2.0 * (w[0] * w[1]) ** 2 - 1.0
        else:  # print: a random sum of waves
            v = sum(w) / math.sqrt(len(w) / 2)
        return 0.5 + 0.5 * np.tanh(self.sharpness * v) / math.tanh(self.sharpness)


def _wave(rng: np.random.Generator, period: float, angle: float) -> tuple[float, float, float]:
    return (round(math.cos(angle) / period, 4), round(math.sin(angle) / period, 4),
            round(float(rng.uniform(0, 2 * math.pi)), 4))


def sample_texture(rng: np.random.Generator) -> Texture:
    """Draw one garment's fine print: kind, period (4-11% of the person's height), angle, phase, contrast."""
    kind = str(rng.choice(TEXTURES))
    period = float(rng.uniform(0.04, 0.11))
    angle = float(rng.uniform(0, math.pi))
    if kind == "stripes":
        waves = (_wave(rng, period, angle),)
    elif kind in ("checks", "dots"):
        waves = (_wave(rng, period, angle), _wave(rng, period, angle + math.pi / 2))
    else:
        waves = tuple(_wave(rng, period * float(rng.uniform(0.7, 1.4)), float(rng.uniform(0, math.pi)))
                      for _ in range(3))
    return Texture(kind=kind, waves=waves, sharpness=round(float(rng.uniform(0.5, 4.0)), 4),
                   contrast=round(float(rng.uniform(0.35, 0.8)), 4))


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
    upper_texture: Texture  # fine print of the upper garment (towards ``upper2``)
    lower_texture: Texture  # fine print of the lower garment (towards ``lower2``)


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
        upper_texture=sample_texture(rng),  # drawn last: the coarse look above is that of render version 1
        lower_texture=sample_texture(rng),
    )


def identity_appearance(config: SynthConfig, domain: int, pid: int) -> Appearance:
    """The appearance of identity ``pid`` (train or test) of domain index ``domain``."""
    key = (config.seed, _TAG_IDENTITY, domain, pid)
    return sample_appearance(_rng(*key), key)


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
    alt = labels == _LOWER2  # garment pixels in the garment's second colour
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
        alt |= m
    if a.lower_stripe and not b.side:
        xs = np.arange(w, dtype=np.float32)[None, :]
        m = (np.abs(np.abs(xs - b.cx) - b.hw * 0.5 - b.lw * 0.8) < max(0.6, b.lw * 0.35))
        m = np.broadcast_to(m, (h, w)) & (labels == _LOWER)
        img[m] = a.lower2
        alt |= m
    # fine prints, anchored to the body (centre line, shoulders) in units of its height: each
    # garment pixel is pulled towards the garment's other colour
    x = (np.arange(w, dtype=np.float32)[None, :] - b.cx) / b.ph
    y = (np.arange(h, dtype=np.float32)[:, None] - b.shoulder) / b.ph
    for tex, parts, first, second in (
            (a.upper_texture, upper, a.upper, a.upper2),
            (a.lower_texture, (labels == _LOWER) | (labels == _LOWER2), a.lower, a.lower2)):
        if parts.any():
            t = np.broadcast_to(tex.contrast * tex.field(x, y), (h, w))[parts][:, None]
            other = np.where(alt[parts][:, None], np.asarray(first, np.float32), np.asarray(second, np.float32))
            img[parts] = (1 - t) * img[parts] + t * other
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
