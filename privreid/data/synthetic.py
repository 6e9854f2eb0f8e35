"""Procedural multi-domain person re-identification data (calibration: see below).

Each identity has a persistent appearance (clothing colours and patterns, a fine print on each garment, hair,
skin, accessory and its side, body proportions), drawn with pose, viewpoint, scale / translation jitter and
occluders. The fine prints (stripes, checks, dots or plane waves at a seeded period of 4-11% of the height;
:class:`.synthetic_render.Texture`) give identities real clothing's fine detail, so a model using them is about
as fragile under small adversarial perturbations as a real ReID model (Market-1501: PGD at 5/255 takes mAP from
about 77% to below 1%). Each camera has its own style (illumination, colour cast, contrast, blur, noise,
background); domains group cameras with strongly different style distributions, and disjoint identities.
Output is JPEG files in the Market-1501 layout.

Calibration, render version 2 (2-core CPU machine, ``OMP_NUM_THREADS=1``; R1 / mAP per domain, torchreid
protocol). The models are ``make demo``'s: ``privreid train --config configs/demo-cpu.yaml --method M``
(ResNet-18 from scratch, 64x32, SGD lr 0.05, batch 32, 5 rounds, synthA-C seen, synthD held out), 220-245 s
each. Attack: ``privreid attack --models ckpt.pt ... --method pgd --eps 8/255 --alpha 1/255 --steps 10
--domains synthA,synthB,synthC`` (47 s for both models)::

    render  method       seen R1 A / B / C    unseen R1 D   seen mAP clean -> PGD (drop)
    1       centralized  92.8 / 84.3 / 85.1   34.8          73.9 -> 27.3 (63%; A 20%, B 87%, C 89%)
    2       centralized  75.4 / 71.4 / 67.6   21.7          60.3 -> 14.6 (76%; A 47%, B 86%, C 96%)
    2       fedpav       33.3 / 62.9 / 63.5   34.8          44.6 -> 20.0 (55%; A 13%, B 66%, C 73%)
    2       untrained    mean 1.9             0.0           -

(render 1: without the prints; seen mAP: mean over synthA-C; drop = (clean - attacked) / clean.) The target was
a PGD drop of at least 70%; the bright synthA stays the most robust. Seen R1 stays in docs/architecture.md's
50-90% on average (centralised 71.5%, FedPav 53.2%), unseen R1 in 20-70%, untrained below 10%.
``domain_shift`` 0.7 (the default) was chosen on render 1: 0.5 made the unseen domain easy (R1 65%), 1.0 the
seen ones hard (23-61%). The default federation (4 domains x 120 train + 50 test identities, 5 cameras) is
7,458 images, about 360 images/s.

Modules: :mod:`.synthetic_config` (configuration, versions, seeded streams), :mod:`.synthetic_render` (who is
drawn, and how), :mod:`.synthetic_cameras` (camera styles), :mod:`.synthetic_cache` (files, manifests, cache);
this one plans and writes the federation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from privreid.errors import ConfigError, DataError
from privreid.log import progress_bar
from privreid.data.synthetic_cache import _save_jpeg, ensure_cached, write_atomically, write_manifest
from privreid.data.synthetic_cameras import CameraStyle, camera_style
from privreid.data.synthetic_config import (_TAG_DISTRACTOR, _TAG_IMAGE, _TAG_JUNK, _TAG_SPLIT, SPLITS, SynthConfig,
                                            _rng, domain_names)
from privreid.data.synthetic_render import (Appearance, identity_appearance, render_person, sample_appearance,
                                            sample_pose)


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


def generate_synthetic(
    out_dir: str | os.PathLike,
    config: SynthConfig | None = None,
    *,
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """Render the synthetic federation into ``out_dir``: ``<domain>/{bounding_box_train,query,bounding_box_test}``
    and ``manifest.json``; deterministic and atomic. DataError if ``out_dir`` is not empty, unless ``overwrite``."""
    config = config or SynthConfig()
    config.validate()
    return write_atomically(out_dir, lambda tmp: _write_federation(tmp, config, progress), overwrite=overwrite)


def _write_federation(tmp: Path, config: SynthConfig, progress: bool) -> None:
    names = domain_names(config)
    plans = [_plan_domain(config, d) for d in range(config.num_domains)]
    total = sum(len(p) for p in plans)
    counts = {}
    # the bar ends its line even when the generation stops (an error, Ctrl-C, SIGTERM)
    with progress_bar(total=total, desc="synthetic", unit="img", enabled=progress) as bar:
        for d, (dname, items) in enumerate(zip(names, plans)):
            for split in SPLITS:
                (tmp / dname / split).mkdir(parents=True)
            cams = [camera_style(config, d, c) for c in range(config.cams_per_domain)]
            apps = {pid: identity_appearance(config, d, pid)
                    for pid in {i.pid for i in items if i.kind == "id"}}
            for it in items:
                arr = _render_item(config, d, it, cams, apps)
                _save_jpeg(arr, tmp / dname / it.split / it.filename, config.jpeg_quality)
                bar.update(1)
            counts[dname] = _count(items)
    write_manifest(tmp, "privreid-synthetic", config, domains=names, counts=counts, total_images=total)


def ensure_synthetic(
    cache_root: str | os.PathLike | None = None,
    config: SynthConfig | None = None,
    *,
    progress: bool = False,
) -> Path:
    """A cached copy of the synthetic federation for ``config`` (``cache_root/synth-<config_hash>``; the root
    defaults to ``$PRIVREID_CACHE`` or ``~/.cache/privreid``), generated once."""
    config = config or SynthConfig()
    config.validate()
    return ensure_cached(
        "synth", config,
        lambda path, overwrite: generate_synthetic(path, config, progress=progress, overwrite=overwrite),
        cache_root,
    )


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

    The image-level non-members of a membership audit (:mod:`privreid.auditing`): same identities, cameras and
    renderer, new poses and noise (seed keys ``(domain, pid, cam, images_per_id_per_cam + j)``, never drawn for
    training), so members and non-members are exchangeable. Writes
    ``out_dir/<domain>/audit_extra/<pid>_c<cam>s2_<j>_01.jpg`` and ``manifest.json``.
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
