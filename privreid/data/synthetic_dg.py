"""Synthetic stand-ins for the small unseen-domain benchmarks (``--data synth-dg``).

Six small domains rendered by :mod:`privreid.data.synthetic` with a seed the embedded federation never uses
(unseen styles), each in the real layout of its benchmark and read by the real loader
(:mod:`privreid.data.formats.dg`), so smoke-scale runs share the paper-scale loading, split and ranking code:

``synth-viper``  (``viper`` layout)  2 cameras, one image per person per camera;
``synth-grid``   (``grid`` layout)   probe / gallery cameras plus pid-0 distractors;
``synth-ilids``  (``ilids`` layout)  several images per person, no camera labels;
``synth-prid``   (``prid`` layout)   2 cameras, one image each, camera-B-only distractors (person numbers
                                      above the paired ones, as PRID2011's 201-749);
``synth-3dpes``  (``3dpes`` layout)  2 cameras, several images per person per camera;
``synth-caviar`` (``caviar`` layout) 2 cameras, several images per person per camera (images 001-010 the
                                      first camera, 011-020 the second, as CAVIAR4REID numbers them).

Rendered in this order, each from its own seed, so a new stand-in leaves the others unchanged. Each is tested
under the DG-ReID protocol, GRID and CAVIAR also under FedPav's cross-camera protocol (paper 004, Table 5).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from privreid.data.synthetic import SynthConfig, generate_synthetic
from privreid.data.synthetic_cache import ensure_cached, write_atomically, write_manifest
from privreid.data.synthetic_config import RenderedImages

SYNTH_DG = "synth-dg"
#: stand-in name -> (the format it is written in, its folder inside the stand-in root)
STANDINS = {
    "synth-viper": ("viper", Path("VIPeR")),
    "synth-grid": ("grid", Path("underground_reid")),
    "synth-ilids": ("ilids", Path("i-LIDS_Pedestrian") / "Persons"),
    "synth-prid": ("prid", Path("prid_2011") / "single_shot"),
    "synth-3dpes": ("3dpes", Path("3DPeS") / "RGB"),
    "synth-caviar": ("caviar", Path("CAVIAR4REID") / "CAVIARa"),
}
#: the stand-ins' cache format: 2 since PRID / 3DPeS / CAVIAR joined (an older cached copy is regenerated)
DG_FORMAT_VERSION = 2
#: added to the seed so that no stand-in domain is a domain of the embedded federation
SEED_OFFSET = 7919


@dataclass(frozen=True)
class SynthDGConfig(RenderedImages):
    """What determines the stand-ins (and their cache key): the seed and image size they are rendered with, and:"""

    #: people per stand-in (GRID: paired people; VIPeR, i-LIDS: all people)
    people: int = 32
    #: GRID and PRID stand-ins: gallery distractors (the rendered domain's pid-0 images)
    distractors: int = 48
    #: i-LIDS stand-in: images per person (split over its two rendered cameras); 3DPeS and CAVIAR stand-ins:
    #: half of it per person per camera
    ilids_images: int = 4

    def render_config(self) -> SynthConfig:
        return SynthConfig(num_domains=len(STANDINS), ids_per_domain=1, test_ids_per_domain=self.people,
                           cams_per_domain=2, images_per_id_per_cam=max(1, self.ilids_images // 2),
                           max_query_cams=1, distractors=self.distractors, junk=0, height=self.height,
                           width=self.width, seed=SEED_OFFSET + self.seed)


def generate_synthetic_dg(out_dir: str | os.PathLike, config: SynthDGConfig | None = None, *,
                          overwrite: bool = False) -> Path:
    """Write the stand-ins into ``out_dir/<stand-in>/`` in their benchmarks' layouts (plus ``manifest.json``)."""
    config = config or SynthDGConfig()

    def fill(tmp: Path) -> None:
        rendered = generate_synthetic(tmp / ".render", config.render_config())
        for (name, (fmt, folder)), domain in zip(STANDINS.items(), sorted(p for p in rendered.iterdir()
                                                                           if p.is_dir())):
            _WRITERS[fmt](_by_person(domain), tmp / name / folder, config)
        shutil.rmtree(rendered)
        write_manifest(tmp, "privreid-synthetic-dg", config, format_version=DG_FORMAT_VERSION,
                       domains=list(STANDINS), formats={name: fmt for name, (fmt, _) in STANDINS.items()})

    return write_atomically(out_dir, fill, overwrite=overwrite)


def ensure_synthetic_dg(cache_root: str | os.PathLike | None = None, config: SynthDGConfig | None = None) -> Path:
    """A cached copy of the stand-ins for ``config``, generated once (like ``ensure_synthetic``)."""
    config = config or SynthDGConfig()
    return ensure_cached(SYNTH_DG, config,
                         lambda path, overwrite: generate_synthetic_dg(path, config, overwrite=overwrite), cache_root,
                         format_version=DG_FORMAT_VERSION)


def standin_roots(root: str | os.PathLike) -> dict[str, tuple[Path, str]]:
    """``{stand-in name: (its root, its format)}`` of a directory written by :func:`generate_synthetic_dg`."""
    return {name: (Path(root) / name, fmt) for name, (fmt, _) in STANDINS.items()}


_NAME = re.compile(r"(\d+)_c(\d)")


def _by_person(domain: Path) -> dict[int, dict[int, list[Path]]]:
    """``{pid: {camera: [images]}}`` of a rendered Market-layout domain (pid 0 = distractors)."""
    out: dict[int, dict[int, list[Path]]] = {}
    for path in sorted(domain.glob("*/*.jpg")):
        pid, cam = (int(g) for g in _NAME.match(path.name).groups())
        if pid >= 0:
            out.setdefault(pid, {}).setdefault(cam, []).append(path)
    return out


def _save(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(src) as img:
        img.convert("RGB").save(dst)


def _paired(people: dict, config: SynthDGConfig) -> list[int]:
    """The first ``config.people`` people (by pid) seen by both rendered cameras; the distractors (pid 0) excluded."""
    return [pid for pid in sorted(people) if pid > 0 and len(people[pid]) == 2][: config.people]


def _distractor_images(people: dict) -> list[Path]:
    """The rendered domain's distractor (pid-0) images, camera by camera."""
    return [path for paths in people.get(0, {}).values() for path in paths]


def _write_viper(people: dict, base: Path, config: SynthDGConfig) -> None:
    for n, pid in enumerate(_paired(people, config)):
        _save(people[pid][1][0], base / "cam_a" / f"{n:03d}_0.bmp")
        _save(people[pid][2][0], base / "cam_b" / f"{n:03d}_90.bmp")


def _write_grid(people: dict, base: Path, config: SynthDGConfig) -> None:
    for n, pid in enumerate(_paired(people, config), start=1):
        _save(people[pid][1][0], base / "probe" / f"{n:04d}_1_{n:05d}_0_0_0_0.jpeg")
        _save(people[pid][2][0], base / "gallery" / f"{n:04d}_2_{n:05d}_0_0_0_0.jpeg")
    for k, path in enumerate(_distractor_images(people)):
        _save(path, base / "gallery" / f"0000_{1 + k % 2}_{k:05d}_0_0_0_0.jpeg")


def _write_prid(people: dict, base: Path, config: SynthDGConfig) -> None:
    """Paired people are persons 1..n in both cameras; the distractors are camera B's persons after them."""
    paired = _paired(people, config)
    for n, pid in enumerate(paired, start=1):
        _save(people[pid][1][0], base / "cam_a" / f"person_{n:04d}.png")
        _save(people[pid][2][0], base / "cam_b" / f"person_{n:04d}.png")
    for k, path in enumerate(_distractor_images(people)):
        _save(path, base / "cam_b" / f"person_{len(paired) + 1 + k:04d}.png")


def _write_3dpes(people: dict, base: Path, config: SynthDGConfig) -> None:
    for n, pid in enumerate(_paired(people, config), start=1):
        for cam in (1, 2):
            for k, path in enumerate(people[pid][cam], start=1):
                _save(path, base / f"{n:03d}_{cam}_20100611_{k:04d}.bmp")


def _write_caviar(people: dict, base: Path, config: SynthDGConfig) -> None:
    for n, pid in enumerate(_paired(people, config), start=1):
        for cam in (1, 2):
            for k, path in enumerate(people[pid][cam][:10], start=1):
                _save(path, base / f"{n:04d}{10 * (cam - 1) + k:03d}.jpg")


def _write_ilids(people: dict, base: Path, config: SynthDGConfig) -> None:
    persons = [pid for pid in sorted(people) if pid > 0][: config.people]
    for n, pid in enumerate(persons, start=1):
        shots = [p for cam in sorted(people[pid]) for p in people[pid][cam]][: config.ilids_images]
        for k, path in enumerate(shots, start=1):
            _save(path, base / f"{n:04d}{k:03d}.jpg")


_WRITERS = {"viper": _write_viper, "grid": _write_grid, "ilids": _write_ilids, "prid": _write_prid,
            "3dpes": _write_3dpes, "caviar": _write_caviar}

__all__ = ["SYNTH_DG", "STANDINS", "SynthDGConfig", "ensure_synthetic_dg", "generate_synthetic_dg", "standin_roots"]


def load_standins(root: str | os.PathLike) -> dict:
    """The stand-ins of ``root`` as datasets (split 0 of each, :func:`privreid.data.formats.dg.load_dg_dataset`)."""
    from privreid.data.formats.dg import load_dg_dataset

    datasets = {}
    for name, (path, fmt) in standin_roots(root).items():
        datasets[name] = load_dg_dataset(path, fmt)
        datasets[name].name = name
    return datasets
