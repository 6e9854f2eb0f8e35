"""What every small-benchmark loader of :mod:`privreid.data.formats.dg` shares: :class:`ReleaseTree`,
:class:`DGPool` and the helpers that read their releases' files."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from privreid.data.formats.base import IMAGE_SUFFIXES
from privreid.data.types import Sample
from privreid.errors import DataError


@dataclass(frozen=True)
class ReleaseTree:
    """Where a dataset's release lies inside a root: ``layout``, the expected tree in one line (errors,
    ``--help``); ``levels``, the root's sub-folders that may hold it, most nested first (``""``: the root);
    ``holding``, folders the release folder must contain."""

    layout: str
    levels: tuple[str, ...]
    holding: tuple[str, ...] = ()

    def find(self, root: Path) -> Path | None:
        """The first ``root/<level>`` that is a directory holding every folder of ``holding``, or ``None``."""
        for rel in self.levels:
            path = root / rel if rel else root
            if path.is_dir() and all((path / sub).is_dir() for sub in self.holding):
                return path
        return None


@dataclass
class DGPool:
    """A small benchmark before splitting.

    ``views[pid] = (view_a, view_b)``: the identity's query-view and gallery-view images (``view_b`` is
    ``view_a`` for i-LIDS, which has no camera labels: query and gallery are two distinct images; ``shared_view``
    marks that case and CUHK-SYSU's). An identity with an empty view is never a query. ``distractors``:
    gallery-only images of other identities (GRID's 775, PRID's 549). ``fixed_test``: the test identities of a
    dataset with one released split (CUHK02's P5). ``frames``: an identity's sequence frames per view where the
    release has them (PRID's ``multi_shot/``), which FedPav's split trains on.
    """

    name: str
    root: str
    views: dict[int, tuple[list[Sample], list[Sample]]]
    distractors: list[Sample] = field(default_factory=list)
    shared_view: bool = False
    fixed_test: list[int] | None = None
    frames: dict[int, tuple[list[Sample], list[Sample]]] = field(default_factory=dict)

    @property
    def paired_ids(self) -> list[int]:
        """Identities that can be tested: seen in both views (twice, for a shared view)."""
        need = 2 if self.shared_view else 1
        return sorted(pid for pid, (a, b) in self.views.items()
                      if len(a) >= need and len(b) >= 1)


def images(folder: Path, suffixes: tuple[str, ...] = IMAGE_SUFFIXES) -> list[Path]:
    """The image files of ``folder``, sorted by name; :class:`DataError` when it is missing."""
    if not folder.is_dir():
        raise DataError(f"missing folder {folder}")
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in suffixes and p.is_file())


def bad_name(path: Path, convention: str) -> DataError:
    return DataError(f"file name {path} does not follow the {convention} naming convention")


def numbered_views(base: Path, suffix: str, per_camera: int) -> dict[int, tuple[list[Sample], list[Sample]]]:
    """The ``<pid:04d><n:03d><suffix>`` images of ``base`` (CAVIAR4REID, CUHK01) as ``(path, pid, camid)`` by
    identity, (camera 0, other cameras): an identity's images ``n`` = 001, 002, ... come ``per_camera`` at a
    time from camera 0, then camera 1."""
    name = re.compile(rf"(\d{{4}})(\d{{3}}){re.escape(suffix)}")
    viewed = []
    for path in images(base, (suffix,)):
        match = name.fullmatch(path.name)
        if match is None or int(match.group(2)) < 1:
            raise bad_name(path, f"<pid:04d><n:03d>{suffix} (n from 001)")
        camid = (int(match.group(2)) - 1) // per_camera
        viewed.append((min(camid, 1), (str(path), int(match.group(1)), camid)))
    return views_by_identity(viewed)


def views_by_identity(viewed: Iterable[tuple[int, Sample]]) -> dict[int, tuple[list[Sample], list[Sample]]]:
    """Group ``(view, (path, pid, camid))`` pairs by identity into (view-0 samples, view-1 samples), in order."""
    views: dict[int, tuple[list[Sample], list[Sample]]] = {}
    for view, sample in viewed:
        views.setdefault(sample[1], ([], []))[view].append(sample)
    return views
