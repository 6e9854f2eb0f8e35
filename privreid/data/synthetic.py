"""Procedural multi-domain person re-identification data (calibration: see below).

Each identity has a persistent appearance (clothing colours *and* patterns,
a fine print on each garment, hair, skin, accessory and its side, body
proportions) drawn as a pedestrian with pose, viewpoint, scale / translation
jitter and occluders.  The fine prints (stripes, checks, dots or a sum of
plane waves, at a seeded period of 4-11% of the person's height, angle,
phase, edge sharpness and contrast; :class:`.synthetic_render.Texture`) give
identities the fine detail real clothing has, so a model that uses them is
about as fragile under small adversarial perturbations as a real ReID model
(on Market-1501 a PGD at 5/255 takes mAP from about 77% to below 1%).
Each camera has its own style (illumination, colour cast, contrast, blur,
noise, background); cameras are grouped into domains whose style
distributions differ strongly (bright/warm, dark/blue, hazy/grey/noisy,
saturated, ...).  Identity sets are disjoint across domains.  Output is real
JPEG files in the Market-1501 layout, so the real-data loader reads it.

Calibration, render version 2 (issue 15; the 2-core CPU machine, one thread,
``OMP_NUM_THREADS=1``; R1 / mAP on each domain's query/gallery, torchreid
protocol).  The models are ``make demo``'s: ``privreid train --config
configs/demo-cpu.yaml --method M`` (ResNet-18 from scratch, 64x32 input, SGD
lr 0.05, batch 32, 5 epochs / rounds, 3 training domains synthA-C, synthD
held out; the default federation from the cache), about 220-245 s each.  The
attack is ``privreid attack --models ckpt.pt ... --method pgd --eps 8/255
--alpha 1/255 --steps 10 --domains synthA,synthB,synthC`` (10-step PGD,
L-inf, feature-space loss, on every query of the seen test sets; 47 s for
both models)::

    render  method       seen R1 A / B / C    unseen R1 D   seen mAP clean -> PGD (drop)
    1       centralized  92.8 / 84.3 / 85.1   34.8          73.9 -> 27.3 (63%; A 20%, B 87%, C 89%)
    2       centralized  75.4 / 71.4 / 67.6   21.7          60.3 -> 14.6 (76%; A 47%, B 86%, C 96%)
    2       fedpav       33.3 / 62.9 / 63.5   34.8          44.6 -> 20.0 (55%; A 13%, B 66%, C 73%)
    2       untrained    mean 1.9             0.0           -

(render 1: the generator before the prints, same commands; seen mAP: the
mean over synthA-C; drop = (clean - attacked) / clean.)  With the prints the
centralised model loses 76% of its seen mAP under the 10-step PGD at 8/255
(target: at least 70%), against 63% before; the bright domain synthA
(saturated highlights, no blur) stays the most robust.  Trained seen-domain
R1 stays in the 50-90% of docs/architecture.md on average (centralised
71.5%, FedPav 53.2%; FedPav's synthA is below it at 33.3%), unseen R1 in
20-70% (21.7%, 34.8%) and untrained below 10%.

Earlier calibration (render version 1, ``privreid train --data DIR
--test-domains synthD --method M --rounds N --height 64 --width 32
--lr-backbone 0.05 --lr-head 0.05`` on data from
``generate_synthetic(DIR, SynthConfig(domain_shift=S))``; the 0.7 rows are
``make demo``)::

    domain_shift  method       epochs  seen R1 A / B / C     unseen R1 D
    1.0           centralized  4       60.9 / 22.9 / 48.6    8.7
    0.5           centralized  4       94.2 / 90.0 / 91.9    65.2
    0.75          centralized  5       91.3 / 65.7 / 82.4    34.8
    0.75          fedpav       5       50.7 / 57.1 / 79.7    17.4
    0.7 (default) centralized  5       95.7 / 88.6 / 91.9    30.4
    0.7 (default) fedpav       5       65.2 / 55.7 / 81.1    40.6
    0.7 (default) untrained    -       mean 4.2              1.4

The default federation holds 7,458 images (4 domains x 120 train + 50 test
identities, 5 cameras) and renders at about 360 images/s (550 before the
prints).

The generator is split in four modules: :mod:`.synthetic_config` (the
configuration, versions and seeded streams), :mod:`.synthetic_render` (who
is drawn, and how), :mod:`.synthetic_cameras` (each camera's style) and
:mod:`.synthetic_cache` (files, manifests, the cache); this module plans and
writes the federation and re-exports their public names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from privreid.errors import ConfigError, DataError
from privreid.data.synthetic_cache import (
    _save_jpeg,
    ensure_cached,
    read_manifest,
    write_atomically,
    write_manifest,
)
from privreid.data.synthetic_cameras import CameraStyle, camera_style, domain_preset
from privreid.data.synthetic_config import (
    _TAG_DISTRACTOR,
    _TAG_IMAGE,
    _TAG_JUNK,
    _TAG_SPLIT,
    FORMAT_VERSION,
    RENDER_VERSION,
    SPLITS,
    SynthConfig,
    _rng,
    config_hash,
    domain_names,
)
from privreid.data.synthetic_render import (
    Appearance,
    Pose,
    identity_appearance,
    render_person,
    sample_appearance,
    sample_pose,
)

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
    "read_manifest",
    "write_manifest",
]


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
        from privreid.log import progress_bar

        bar = progress_bar(total=total, desc="synthetic", unit="img")
    counts = {}
    try:  # the bar ends its line even when the generation stops (an error, Ctrl-C, SIGTERM)
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
    finally:
        if bar is not None:
            bar.close()
    write_manifest(tmp, "privreid-synthetic", config, domains=names, counts=counts, total_images=total)


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
    (:mod:`privreid.auditing`): same identities, same cameras, same renderer as
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
