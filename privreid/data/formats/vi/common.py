"""Helpers shared by the visible-infrared format modules of :mod:`privreid.data.formats.vi`: list-file readers,
identity-folder walking, marker-file detection and the dataset constructor."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from privreid.data.formats.base import IMAGE_SUFFIXES, check_ids, make_dataset, subfolder
from privreid.data.types import ReIDDataset, Sample, VIProtocol
from privreid.errors import DataError

__all__ = ["marker", "read_ids", "read_int_rows", "read_int_tokens", "read_label_list", "read_lines", "read_rows",
           "vi_dataset", "walk_identity_folders"]


def vi_dataset(name: str, base: Path, train: list[Sample], query: list[Sample], gallery: list[Sample],
               modality: dict[str, str], protocol: VIProtocol,
               tracklets: dict[str, list[str]] | None = None) -> ReIDDataset:
    ds = make_dataset(name, base, train=train, query=query, gallery=gallery)
    ds.modality, ds.vi_protocol, ds.tracklets = modality, protocol, tracklets
    return ds


def read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(f"missing list file {path}")
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh if line.strip()]


def read_rows(path: Path) -> list[list[str]]:
    return [line.split() for line in read_lines(path)]


def read_int_tokens(path: Path) -> list[int]:
    tokens = [t for line in read_lines(path) for t in re.split(r"[,\s]+", line) if t]
    bad = [t for t in tokens if not t.isdigit()]
    if bad:
        raise DataError(f"{path}: expected integers separated by commas or spaces, got {bad[0]!r}")
    return [int(t) for t in tokens]


def read_ids(path: Path) -> list[int]:
    ids = read_int_tokens(path)
    if not ids:
        raise DataError(f"{path} lists no identity")
    return ids


def read_int_rows(path: Path, width: int) -> list[list[int]]:
    out = []
    for lineno, fields in enumerate(read_rows(path), start=1):
        if len(fields) != width or not all(re.fullmatch(r"-?\d+", f) for f in fields):
            raise DataError(f"{path}:{lineno}: expected {width} integers, got {' '.join(fields)!r}")
        out.append([int(f) for f in fields])
    return out


def read_label_list(base: Path, path: Path, camid: Callable[[str], int], mod: str,
                     modality: dict[str, str]) -> list[Sample]:
    """``<relpath> <label>`` lines (RegDB / LLCM ``idx`` files); images are ``base / relpath``."""
    out = []
    for lineno, fields in enumerate(read_rows(path), start=1):
        if len(fields) != 2 or not re.fullmatch(r"-?\d+", fields[1]):
            raise DataError(f"{path}:{lineno}: expected '<relpath> <label>', got {' '.join(fields)!r}")
        image = str(base / fields[0])
        cam = camid(fields[0])
        check_ids(Path(image), int(fields[1]), cam + 1)
        modality[image] = mod
        out.append((image, int(fields[1]), cam))
    return out


def walk_identity_folders(folders: list[tuple[Path, int, str]], ids: list[int],
                           modality: dict[str, str]) -> list[Sample]:
    """Images of ``<folder>/<pid:04d>/*`` for each (folder, camid, modality) and listed identity (missing = unseen)."""
    out = []
    for pid in sorted(ids):
        for folder, cam, mod in folders:
            pid_dir = folder / f"{pid:04d}"
            if not pid_dir.is_dir():
                continue
            for path in sorted(pid_dir.iterdir()):
                if path.suffix.lower() in IMAGE_SUFFIXES:
                    modality[str(path)] = mod
                    out.append((str(path), pid, cam))
    return out


def marker(folder: str, *rel: str) -> Callable[[Path], bool]:
    """Detection by a marker file ``root[/<folder>]/<rel...>`` (the release's top folder is optional)."""
    return lambda root: subfolder(root, (folder,)).joinpath(*rel).is_file()
