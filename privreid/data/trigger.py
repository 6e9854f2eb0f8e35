"""The trigger of a retrieval backdoor: a fixed, seeded pattern stamped on decoded images.

A :class:`Trigger` of ``kind`` ``patch`` is a ``size`` x ``size`` pattern of black and white pixels (drawn from
``seed``) at ``position`` of the ``height`` x ``width`` input. A blended trigger (``kind`` ``blend``; Chen et al.
2017, Sec. 3.2.2, Eq. 2: ``x' = (1 - alpha) x + alpha k``) mixes the whole image with a seeded key ``k`` of
uniform random pixels in ``[0, 255]``, rounded to ``uint8``; one ``alpha`` serves training and evaluation (the
paper may test with a larger one). Either is stamped as the pipeline decodes the image
(:meth:`TensorPipeline.decode <privreid.data.transforms.TensorPipeline.decode>`), so it has the same pixels in
training and evaluation; later augmentations move or hide it as they would a badge. :func:`stamped_samples`
writes stamped images as lossless PNGs at the input size and returns the samples with those paths, so a
malicious client's data (:mod:`privreid.malicious_clients.backdoor`) and triggered queries (``privreid eval``)
need no branch in the engine, client update or pipeline. DBA (:mod:`privreid.malicious_clients.dba`) splits the
patch into ``parts`` horizontal strips (:meth:`Trigger.part`), one per malicious client.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from privreid.data.formats import read_image
from privreid.data.transforms import build_transforms, tensor_pipeline
from privreid.data.types import Sample
from privreid.errors import ConfigError

#: where the patch sits on the image
POSITIONS = ("center", "top-left", "top-right", "bottom-left", "bottom-right")
#: ``patch``: a black-and-white square; ``blend``: the whole image mixed with a random key (Chen et al. 2017)
KINDS = ("patch", "blend")


@dataclass(frozen=True)
class Trigger:
    """A seeded ``size`` x ``size`` patch at ``position``; ``rows`` (a DBA part) stamps only those rows of it; or
    (``kind="blend"``) the whole image blended with a seeded key at weight ``alpha``."""

    size: int
    position: str = "center"
    seed: int = 0
    rows: tuple[int, int] | None = None
    kind: str = "patch"
    alpha: float = 0.2

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Trigger:
        """The trigger of an attack's options (``trigger``, ``size``, ``position``, ``pattern_seed``, ``alpha``);
        ConfigError if malformed."""
        kind, alpha = settings.get("trigger", "patch"), settings.get("alpha", 0.2)
        if kind not in KINDS:
            raise ConfigError(f"trigger must be one of {', '.join(KINDS)} (got {kind!r})")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
            raise ConfigError(f"trigger alpha must lie in (0, 1] (got {alpha!r})")
        size, position, seed = settings["size"], settings["position"], settings["pattern_seed"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"trigger size must be a whole number of pixels >= 1 (got {size!r})")
        if position not in POSITIONS:
            raise ConfigError(f"trigger position must be one of {', '.join(POSITIONS)} (got {position!r})")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"trigger pattern_seed must be an integer (got {seed!r})")
        return cls(size, position, seed, kind=kind, alpha=float(alpha))

    def describe(self) -> str:
        """``6x6 patch at center, pattern seed 0`` or ``blended key (alpha 0.2), pattern seed 0``."""
        shape = (f"blended key (alpha {self.alpha:g})" if self.kind == "blend"
                 else f"{self.size}x{self.size} patch at {self.position}")
        return f"{shape}, pattern seed {self.seed}"

    def check_fits(self, height: int, width: int) -> None:
        """ConfigError when the patch is larger than the ``height`` x ``width`` input image (a blend always fits)."""
        if self.kind == "patch" and self.size > min(height, width):
            raise ConfigError(f"a {self.size}x{self.size} trigger is larger than the {height}x{width} image "
                              f"(size must be at most {min(height, width)})")

    def part(self, index: int, parts: int) -> Trigger:
        """Strip ``index`` of ``parts`` equal horizontal strips of the patch (DBA's local trigger)."""
        if self.kind != "patch":
            raise ConfigError("a distributed backdoor splits a patch trigger into strips; trigger=blend is one "
                              "whole-image key")
        if not 1 <= parts <= self.size:
            raise ConfigError(f"a {self.size}-pixel trigger cannot be split into {parts} strips (at most {self.size})")
        return replace(self, rows=(index * self.size // parts, (index + 1) * self.size // parts))

    def pattern(self) -> torch.Tensor:
        """The whole patch: ``uint8`` ``(3, size, size)``, each value 0 or 255."""
        bits = torch.randint(0, 2, (3, self.size, self.size), generator=torch.Generator().manual_seed(self.seed))
        return (bits * 255).to(torch.uint8)

    def corner(self, height: int, width: int) -> tuple[int, int]:
        """Top-left pixel of the patch on a ``height`` x ``width`` image."""
        s = self.size
        top = {"top": 0, "bottom": height - s}.get(self.position.split("-")[0], (height - s) // 2)
        left = {"left": 0, "right": width - s}.get(self.position.split("-")[-1], (width - s) // 2)
        return top, left

    def stamp(self, image: torch.Tensor) -> torch.Tensor:
        """A copy of ``image`` (``uint8`` ``(3, H, W)``) with the patch (or this part's rows of it) stamped, or
        blended with the key (Chen et al. Eq. 2, rounded half to even)."""
        height, width = image.shape[-2:]
        if self.kind == "blend":
            key = torch.randint(0, 256, (3, height, width), generator=torch.Generator().manual_seed(self.seed))
            return ((1 - self.alpha) * image.double() + self.alpha * key.double()).round().to(torch.uint8)
        self.check_fits(height, width)
        top, left = self.corner(height, width)
        first, last = self.rows or (0, self.size)
        out = image.clone()
        out[:, top + first:top + last, left:left + self.size] = self.pattern()[:, first:last]
        return out


class _StampedFiles:
    """Stamped copies of images in one temporary directory of the process, each written once, removed at exit."""

    def __init__(self) -> None:
        self._dir: Path | None = None

    def directory(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="privreid-trigger-"))
            atexit.register(shutil.rmtree, self._dir, True)
        return self._dir

    def path(self, source: str, trigger: Trigger, height: int, width: int) -> str:
        key = hashlib.sha256(repr((str(Path(source).resolve()), trigger, height, width)).encode()).hexdigest()[:24]
        target = self.directory() / f"{key}.png"
        if not target.exists():
            decode = tensor_pipeline(build_transforms(height, width, train=False)).decode
            stamped = trigger.stamp(decode(read_image(source)))
            partial = target.with_suffix(".part.png")
            Image.fromarray(stamped.permute(1, 2, 0).numpy()).save(partial)
            partial.replace(target)
        return str(target)


_FILES = _StampedFiles()


def stamped_samples(samples: list[Sample], trigger: Trigger, height: int, width: int) -> list[Sample]:
    """``samples`` with each image replaced by its stamped copy at the ``height`` x ``width`` input size."""
    trigger.check_fits(height, width)
    return [(_FILES.path(path, trigger, height, width), pid, cam) for path, pid, cam in samples]
