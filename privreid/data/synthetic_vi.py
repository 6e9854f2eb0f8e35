"""Procedural visible-infrared (VI) person re-identification data, as images or as video tracklets.

Extends :mod:`privreid.data.synthetic` (same pedestrians, poses, camera styles, renderer) with the conditions
of L2RW+ (Jiang et al., paper 003, Sec. II-B and III-B):

* **Infrared cameras** (:func:`render_thermal`): the same shapes, patterns and accessories, each part at a
  fixed temperature instead of its colour (warm skin, cooler clothing, cool bags and background), so hue and
  saturation are lost and shape and texture kept. ``ir_reflectance`` (default 0.5) adds part of each garment's
  visible brightness, as SYSU-MM01's and LLCM's near-infrared cameras see it (0: pure thermal; see the
  calibration). Saved as single-channel JPEG (a reader replicates the channel, exactly).
* **Modality incomplete**: each camera is visible-only, infrared-only or both (each shot one modality, drawn):
  ``camera_modalities`` is a ``v`` / ``i`` / ``b`` pattern rotated by the entity index.
* **Identity missing**: each identity is seen by a random subset of at least ``min_cams_per_id`` cameras,
  redrawn until it has a visible and an infrared shot (every test identity has an IR query and a visible gallery).
* **Entities**: ``num_entities`` datasets with disjoint identities; entity ``e`` uses domain ``e``'s camera
  styles (the calibrated shift of :mod:`privreid.data.synthetic`), for the EI and ES protocols.
* **Video** (``video=True``): a tracklet is ``frames_per_tracklet`` frames of one walk cycle (same person,
  camera, viewpoint, background, occluder; phase + ``2*pi/T`` per frame, a slight drift).

Layout (``vi-folders``, :func:`privreid.data.formats.vi.vi_folders.load_vi_folders`)::

    out/manifest.json                       format "privreid-synthetic-vi", entities, camera kinds
    out/<entity>/{train,test}/{visible,infrared}/c<cam>/<pid>/<pid>_c<cam>_<k>.jpg        (images)
    out/<entity>/{train,test}/{visible,infrared}/c<cam>/<pid>/t<k>/<pid>_c<cam>_t<k>_f<t>.jpg  (video)

The test split's infrared shots are the query, its visible shots the gallery; entities are ``viA, viB, ...``
(``vidA ...`` for video). The default (3 entities x (60 train + 30 test) identities, 4 cameras, 2 shots, 64x32)
is 1,684 images in 1.7 s on one core (video, 6 frames: 10,104 frames, 5.9 s).

Calibration (2-core CPU machine; ES protocol: centralised ERM on viA + viB, viC unseen; ResNet-18 from
scratch, 64x32, SGD lr 0.05, 30 epochs; R1 / mAP in %; IR query -> visible gallery unless noted)::

    ir_reflectance   model        viA IR->vis   viA vis->vis   viA IR->IR   viC (unseen) IR->vis
    0 (thermal)      untrained    2.1 / 6.7 (seen mean)                      4.2 / 8.2
    0 (thermal)      30 epochs    2.6 / 9.7     70.6 / 67.7    23.9 / 33.2   4.2 / 7.7
    0.5 (default)    untrained    2.8 / 7.7 (seen mean)                      5.6 / 8.3
    0.5 (default)    30 epochs    11.7 / 20.1   72.9 / 73.1    47.8 / 48.5   13.9 / 14.9

With pure thermal images identity loss alone stays at chance across modalities (it learns each modality, not
the link); at 0.5 cross-modality retrieval is learnable but far below same-modality, the real benchmarks'
regime. Commands: ``privreid train --data synth-vi --protocol es --method centralized --rounds 30
--eval-every 10 --height 64 --width 32 --lr-backbone 0.05 --lr-head 0.05 --out RUN``, then ``privreid compare
RUN/ckpt.pt`` and :func:`privreid.evaluation.model_eval.evaluate_model` (``mode=``) in each mode.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from PIL import Image

from privreid.data.synthetic_cache import _save_jpeg, ensure_cached, write_atomically, write_manifest
from privreid.data.synthetic_cameras import _LUMA, CameraStyle, camera_style
from privreid.data.synthetic_config import GeneratorConfig, SynthConfig, _rng
from privreid.data.synthetic_render import Appearance, Pose, render_person, sample_appearance, sample_pose
from privreid.data.types import INFRARED, VISIBLE
from privreid.errors import ConfigError
from privreid.log import progress_bar

__all__ = [
    "BOTH",
    "VI_FORMAT_VERSION",
    "VI_RENDER_VERSION",
    "SynthVIConfig",
    "camera_modalities",
    "ensure_synthetic_vi",
    "entity_names",
    "generate_synthetic_vi",
    "render_thermal",
    "thermal_appearance",
    "thermal_camera",
    "walk_cycle",
]

VI_FORMAT_VERSION = 1
VI_RENDER_VERSION = 1
#: camera kind that records both modalities
BOTH = "both"
_KINDS = {"v": VISIBLE, "i": INFRARED, "b": BOTH}
_SPLITS = ("train", "test")

# Stream tags of the VI generator (disjoint from those of privreid.data.synthetic).
_TAG_VI_PLAN = 101
_TAG_VI_IDENTITY = 102
_TAG_VI_SHOT = 103
_TAG_VI_FRAME = 104

# Apparent temperatures (grey levels before the camera) of the thermal renderer.
_T_SKIN, _T_HAIR, _T_HAT = 0.92, 0.62, 0.5
_T_UPPER, _T_COAT, _T_LOWER = 0.66, 0.52, 0.6
_T_PATTERN = 0.14  # a pattern / second garment colour is this much cooler
_T_LOGO = 0.22
_T_SHOES, _T_BAG = 0.42, 0.3
_T_SCENE = (0.08, 0.27)  # background: offset + scale of the visible scene's luminance
_T_CLUTTER = 0.22


@dataclass(frozen=True)
class SynthVIConfig(GeneratorConfig):
    """Everything that determines a synthetic VI federation (and its cache key); rendered at 64x32 by default
    (the size is re-declared at the end of the fields)."""

    num_entities: int = 3
    #: training identities per entity (pids ``1..ids_per_entity``)
    ids_per_entity: int = 60
    #: test identities per entity (the pids after the training ones)
    test_ids_per_entity: int = 30
    cams_per_entity: int = 4
    #: camera kinds, one letter per camera: ``v`` visible, ``i`` infrared, ``b`` both
    #: (cycled to ``cams_per_entity`` and rotated by the entity index)
    camera_modalities: str = "vibv"
    min_cams_per_id: int = 2
    #: shots (images, or tracklets with ``video``) of one identity per camera
    shots_per_id_per_cam: int = 2
    #: share of a garment's visible brightness that the infrared cameras see (0: pure thermal;
    #: see :func:`thermal_appearance`); hue and saturation are always lost
    ir_reflectance: float = 0.5
    video: bool = False
    frames_per_tracklet: int = 6
    height: int = 64
    width: int = 32

    def validate(self) -> None:
        need = self._require
        need(1 <= self.num_entities <= 26, "num_entities must be in 1..26")
        need(self.ids_per_entity >= 1 and self.test_ids_per_entity >= 1, "identity counts must be >= 1")
        need(self.ids_per_entity + self.test_ids_per_entity <= 9999, "at most 9999 identities per entity")
        need(2 <= self.cams_per_entity <= 9, "cams_per_entity must be in 2..9")
        need(2 <= self.min_cams_per_id <= self.cams_per_entity, "min_cams_per_id must be in 2..cams_per_entity")
        need(bool(self.camera_modalities) and set(self.camera_modalities) <= set(_KINDS),
             f"camera_modalities must be letters v/i/b, got {self.camera_modalities!r}")
        for e in range(self.num_entities):
            kinds = set(camera_modalities(self, e))
            need(bool(kinds & {VISIBLE, BOTH}) and bool(kinds & {INFRARED, BOTH}),
                 f"entity {e} needs a camera for each modality, got {camera_modalities(self, e)}")
        need(self.shots_per_id_per_cam >= 1, "shots_per_id_per_cam must be >= 1")
        need(self.frames_per_tracklet >= 1, "frames_per_tracklet must be >= 1")
        need(0.0 <= self.ir_reflectance <= 1.0, "ir_reflectance must be in [0, 1]")
        self._check_rendering()

    def style_config(self) -> SynthConfig:
        """The :class:`SynthConfig` whose camera styles (per entity = domain) this data uses."""
        return SynthConfig(num_domains=self.num_entities, cams_per_domain=self.cams_per_entity,
                           height=self.height, width=self.width, seed=self.seed,
                           domain_shift=self.domain_shift, camera_jitter=self.camera_jitter)


def entity_names(config: SynthVIConfig) -> list[str]:
    """``["viA", "viB", ...]`` for images, ``["vidA", ...]`` for video."""
    prefix = "vid" if config.video else "vi"
    return [prefix + chr(65 + e) for e in range(config.num_entities)]


def camera_modalities(config: SynthVIConfig, entity: int) -> list[str]:
    """Kind of each camera of ``entity``: ``"visible"``, ``"infrared"`` or ``"both"``."""
    pattern = config.camera_modalities
    n = len(pattern)
    return [_KINDS[pattern[(cam + entity) % n]] for cam in range(config.cams_per_entity)]


# --------------------------------------------------------------------------- thermal rendering


def thermal_appearance(a: Appearance, reflectance: float = 0.0) -> Appearance:
    """``a`` with every colour replaced by its part's apparent temperature (a grey level); shapes, patterns and
    accessories untouched. ``reflectance = r > 0`` adds ``r * (luminance - 0.5)`` of each garment, accessory and
    hat colour (what a near-infrared camera, SYSU-MM01, LLCM, still sees); 0 is a pure thermal camera (RegDB).
    Skin and hair keep their temperatures."""

    def grey(v: float, colour: tuple[float, float, float] | None = None) -> tuple[float, float, float]:
        if colour is not None:
            v += reflectance * (float(np.dot(colour, _LUMA)) - 0.5)
        v = min(max(v, 0.0), 1.0)
        return (v, v, v)

    upper = _T_COAT if a.coat else _T_UPPER
    return replace(
        a, skin=grey(_T_SKIN), hair=grey(_T_HAIR), hat=grey(_T_HAT, a.hat),
        upper=grey(upper, a.upper), upper2=grey(upper - _T_PATTERN, a.upper2),
        logo_colour=grey(upper - _T_LOGO, a.logo_colour),
        lower=grey(_T_LOWER, a.lower), lower2=grey(_T_LOWER - _T_PATTERN, a.lower2),
        shoes=grey(_T_SHOES, a.shoes), accessory_colour=grey(_T_BAG, a.accessory_colour),
    )


def thermal_camera(style: CameraStyle) -> CameraStyle:
    """The infrared counterpart of a visible camera: same place, optics and sensor noise, no colour.

    The background is the scene's luminance compressed to cool greys; the illumination keeps only its spatial
    non-uniformity; haze is mostly seen through. :func:`render_thermal` applies ``noise`` on the one channel.
    """
    lum = style.scene @ _LUMA
    scene = np.repeat((_T_SCENE[0] + _T_SCENE[1] * lum)[..., None], 3, axis=2).astype(np.float32)
    return replace(
        style, cast=np.ones(3, np.float32), saturation=1.0, haze=0.3 * style.haze,
        haze_colour=np.full(3, _T_SCENE[0], np.float32), light=(style.light / style.gain).astype(np.float32),
        scene=scene, clutter=np.full(3, _T_CLUTTER, np.float32),
    )


def render_thermal(appearance: Appearance, pose: Pose, camera: CameraStyle, height: int, width: int,
                   rng: np.random.Generator, reflectance: float = 0.0) -> np.ndarray:
    """Render one infrared crop through ``camera`` (a :func:`thermal_camera`): (H, W, 3) uint8, equal channels.

    ``reflectance``: see :func:`thermal_appearance`.
    """
    grey = render_person(thermal_appearance(appearance, reflectance), pose, replace(camera, noise=0.0), height, width,
                         rng)[..., 0].astype(np.float32)
    if camera.noise > 0:
        grey += rng.normal(0, camera.noise * 255, grey.shape).astype(np.float32)
    grey = np.clip(grey + 0.5, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.repeat(grey[..., None], 3, axis=2))


def walk_cycle(pose: Pose, frames: int, drift: float = 0.08) -> list[Pose]:
    """``frames`` poses of one walk cycle from ``pose``: phase + 2*pi*t/frames, a slow horizontal drift along
    the viewpoint's facing (front/back views barely move sideways)."""
    direction = {"right": 1.0, "left": -1.0}.get(pose.view, 0.2)
    out = []
    for t in range(frames):
        progress = t / (frames - 1) - 0.5 if frames > 1 else 0.0
        out.append(replace(pose, phase=pose.phase + 2 * math.pi * t / frames,
                           dx=pose.dx + direction * drift * progress))
    return out


# --------------------------------------------------------------------------- plan and writing


@dataclass(frozen=True)
class _Shot:
    split: str  # "train" | "test"
    modality: str
    pid: int
    cam: int  # 0-based
    k: int  # shot index of (pid, cam)

    def folder(self) -> str:
        return f"{self.split}/{self.modality}/c{self.cam + 1}/{self.pid:04d}"


def _plan_entity(config: SynthVIConfig, e: int) -> list[_Shot]:
    """Every shot of entity ``e``: identity, camera (identity missing) and modality (modality incomplete)."""
    rng = _rng(config.seed, _TAG_VI_PLAN, e)
    kinds = camera_modalities(config, e)
    ncam = config.cams_per_entity
    shots: list[_Shot] = []
    for pid in range(1, config.ids_per_entity + config.test_ids_per_entity + 1):
        split = "train" if pid <= config.ids_per_entity else "test"
        for _ in range(1000):
            k = int(rng.integers(config.min_cams_per_id, ncam + 1))
            cams = sorted(int(c) for c in rng.choice(ncam, size=k, replace=False))
            mine = []
            for cam in cams:
                for i in range(config.shots_per_id_per_cam):
                    kind = kinds[cam]
                    modality = kind if kind != BOTH else (INFRARED if rng.random() < 0.5 else VISIBLE)
                    mine.append(_Shot(split, modality, pid, cam, i))
            if {s.modality for s in mine} == {VISIBLE, INFRARED}:
                break
        else:  # pragma: no cover - needs a pathological camera pattern
            raise ConfigError(f"SynthVIConfig: cannot give identity {pid} of entity {e} both modalities")
        shots += mine
    return shots


def _render_shot(config: SynthVIConfig, e: int, shot: _Shot, app: Appearance, visible: CameraStyle,
                 infrared: CameraStyle) -> list[np.ndarray]:
    """The image (one frame) or tracklet (``frames_per_tracklet`` frames) of ``shot``."""
    rng = _rng(config.seed, _TAG_VI_SHOT, e, shot.pid, shot.cam, shot.k)
    pose = sample_pose(visible, rng, config.occlusion_prob)
    poses = walk_cycle(pose, config.frames_per_tracklet) if config.video else [pose]
    frames = []
    for t, p in enumerate(poses):
        frame_rng = _rng(config.seed, _TAG_VI_FRAME, e, shot.pid, shot.cam, shot.k, t)
        if shot.modality == INFRARED:
            frames.append(render_thermal(app, p, infrared, config.height, config.width, frame_rng,
                                         config.ir_reflectance))
        else:
            frames.append(render_person(app, p, visible, config.height, config.width, frame_rng))
    return frames


def _save(arr: np.ndarray, path: Path, modality: str, quality: int) -> None:
    if modality == INFRARED:  # one channel, stored as such (readers replicate it to RGB)
        Image.fromarray(arr[..., 0]).save(path, format="JPEG", quality=quality, optimize=False)
    else:
        _save_jpeg(arr, path, quality)


def _write_federation(tmp: Path, config: SynthVIConfig, progress: bool) -> None:
    names = entity_names(config)
    plans = [_plan_entity(config, e) for e in range(config.num_entities)]
    frames_per_shot = config.frames_per_tracklet if config.video else 1
    total = sum(len(p) for p in plans) * frames_per_shot
    style = config.style_config()
    counts = {}
    # the bar ends its line even when the generation stops (an error, Ctrl-C, SIGTERM)
    with progress_bar(total=total, desc="synthetic VI", unit="img", enabled=progress) as bar:
        for e, (name, shots) in enumerate(zip(names, plans)):
            visible = [camera_style(style, e, c) for c in range(config.cams_per_entity)]
            infrared = [thermal_camera(v) for v in visible]
            apps = {}
            for shot in shots:
                if shot.pid not in apps:
                    key = (config.seed, _TAG_VI_IDENTITY, e, shot.pid)
                    apps[shot.pid] = sample_appearance(_rng(*key), key)
                frames = _render_shot(config, e, shot, apps[shot.pid], visible[shot.cam], infrared[shot.cam])
                folder = tmp / name / shot.folder()
                stem = f"{shot.pid:04d}_c{shot.cam + 1}"
                if config.video:
                    folder = folder / f"t{shot.k}"
                    paths = [folder / f"{stem}_t{shot.k}_f{t:02d}.jpg" for t in range(len(frames))]
                else:
                    paths = [folder / f"{stem}_{shot.k}.jpg"]
                folder.mkdir(parents=True, exist_ok=True)
                for arr, path in zip(frames, paths):
                    _save(arr, path, shot.modality, config.jpeg_quality)
                bar.update(len(frames))
            counts[name] = {
                f"{split}/{modality}": {"shots": sum(1 for s in shots if (s.split, s.modality) == (split, modality)),
                                        "ids": len({s.pid for s in shots if (s.split, s.modality) == (split, modality)})}
                for split in _SPLITS for modality in (VISIBLE, INFRARED)
            }
    write_manifest(tmp, "privreid-synthetic-vi", config, format_version=VI_FORMAT_VERSION,
                   render_version=VI_RENDER_VERSION, domains=names,
                   cameras={name: camera_modalities(config, e) for e, name in enumerate(names)},
                   counts=counts, total_images=total)


def generate_synthetic_vi(out_dir: str | os.PathLike, config: SynthVIConfig | None = None, *,
                          progress: bool = False, overwrite: bool = False) -> Path:
    """Render the synthetic VI federation into ``out_dir`` (``vi-folders`` per entity); deterministic (byte for
    byte) and atomic. DataError if ``out_dir`` is not empty, unless ``overwrite``."""
    config = config or SynthVIConfig()
    config.validate()
    return write_atomically(out_dir, lambda tmp: _write_federation(tmp, config, progress), overwrite=overwrite)


def ensure_synthetic_vi(cache_root: str | os.PathLike | None = None, config: SynthVIConfig | None = None, *,
                        progress: bool = False) -> Path:
    """A cached copy of the synthetic VI federation for ``config`` (``cache_root/synthvi-<hash>``, the cache
    root as :func:`privreid.data.synthetic.ensure_synthetic`'s), generated once."""
    config = config or SynthVIConfig()
    config.validate()
    return ensure_cached(
        "synthvi", config,
        lambda path, overwrite: generate_synthetic_vi(path, config, progress=progress, overwrite=overwrite),
        cache_root, format_version=VI_FORMAT_VERSION, render_version=VI_RENDER_VERSION,
    )
