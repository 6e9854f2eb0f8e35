"""Writing and caching generated datasets: JPEG files, ``manifest.json``, atomic directories and the
content-addressed cache (:mod:`privreid.data.synthetic`, :mod:`.synthetic_vi`, :mod:`.synthetic_dg`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict
from glob import escape as glob_escape
from pathlib import Path

import numpy as np
from PIL import Image

from privreid import __version__
from privreid import environment
from privreid.errors import DataError
from privreid.rundir import LOCK_FILE, RunLock
from privreid.data import synthetic_config
from privreid.data.synthetic_config import FORMAT_VERSION, RENDER_VERSION, config_hash


def _save_jpeg(arr: np.ndarray, path: Path, quality: int) -> None:
    """Write one JPEG (no metadata, fixed settings: same pixels -> same bytes)."""
    Image.fromarray(arr).save(path, format="JPEG", quality=quality, optimize=False,
                              subsampling=2)


def _is_nonempty_dir(p: Path) -> bool:
    return p.is_dir() and any(p.iterdir())


#: the file every generated dataset holds: only a directory holding it (or an older dataset's exact layout,
#: :func:`is_generated_dataset`) is ever replaced by ``overwrite``
DATASET_MARKER = ".privreid-dataset"


def is_generated_dataset(path: Path) -> bool:
    """Whether ``path`` is a dataset privreid generated (:data:`DATASET_MARKER`, or for older ones exactly a
    ``privreid-synthetic*`` ``manifest.json`` and the domain folders it lists), so ``overwrite`` may replace it."""
    if (path / DATASET_MARKER).is_file() and not (path / DATASET_MARKER).is_symlink():
        return True
    manifest = read_manifest(path)
    if not isinstance(manifest, dict) or not str(manifest.get("format", "")).startswith("privreid-synthetic"):
        return False
    domains = manifest.get("domains")
    if not isinstance(domains, list):
        return False
    return all(entry.name == "manifest.json" or (entry.name in domains and entry.is_dir()
                                                 and not entry.is_symlink()) for entry in path.iterdir())


def _write_marker(root: Path) -> None:
    """Write :data:`DATASET_MARKER` into the finished dataset ``root``: a note and every file privreid wrote there
    (``--overwrite`` deletes those and nothing else: :func:`foreign_entry`)."""
    files = sorted(str(p.relative_to(root).as_posix()) for p in root.rglob("*") if p.is_file())
    (root / DATASET_MARKER).write_text(json.dumps({
        "note": "written by privreid; `privreid data synth --overwrite` may replace the files listed here, and "
                "refuses while anything else is in this directory", "files": files}, indent=0) + "\n")


def foreign_entry(root: Path) -> Path | None:
    """The first entry under the generated dataset ``root`` that privreid did not write (a file its marker does not
    list, a symbolic link, a folder holding no listed file), or ``None``.  A marker from before the list (plain
    text) and an older dataset without one: everything under the manifest's domain folders is the dataset's."""
    try:
        listed = set(json.loads((root / DATASET_MARKER).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        listed = None
    if listed is None:
        domains = (read_manifest(root) or {}).get("domains") or []
        mine = {"manifest.json", DATASET_MARKER, LOCK_FILE, *[d for d in domains if isinstance(d, str)]}
        return next((p for p in sorted(root.iterdir()) if p.name not in mine or p.is_symlink()), None)
    own = listed | {DATASET_MARKER, LOCK_FILE}
    folders = {parent.as_posix() for f in listed for parent in Path(f).parents if parent != Path(".")}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink() or (p.is_dir() and rel not in folders) or (not p.is_dir() and rel not in own):
            return p
    return None


def _temporary_prefix(out: Path, kind: str) -> str:
    """``.<name>.<kind>-<pid>-``: the sibling folders a generation works in, named by the process that owns them."""
    return f".{out.name}.{kind}-{os.getpid()}-"


def remove_abandoned_temporaries(out: Path) -> list[Path]:
    """Delete the temporary siblings of ``out`` that a generation killed without warning (SIGKILL, power loss)
    left: those whose owning process (the pid in the name) is no longer alive."""
    removed = []
    for tmp in out.parent.glob(f".{glob_escape(out.name)}.*-*-*"):
        kind, _, rest = tmp.name[len(out.name) + 2:].partition("-")
        pid = rest.split("-", 1)[0]
        if kind in ("tmp", "old") and pid.isdigit() and tmp.is_dir() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_manifest(root: Path, fmt: str, config, *, format_version: int = FORMAT_VERSION,
                   render_version: int = RENDER_VERSION, **extra) -> None:
    """Write ``root/manifest.json``: format, versions, the generator config and its hash, plus ``extra``."""
    manifest = {
        "format": fmt,
        "format_version": format_version,
        "render_version": render_version,
        "person_render_version": synthetic_config.RENDER_VERSION,
        "privreid_version": __version__,
        "config": asdict(config),
        "config_hash": config_hash(config, format_version, render_version),
        **extra,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def write_atomically(out_dir: str | os.PathLike, fill: Callable[[Path], None], *, overwrite: bool = False) -> Path:
    """``fill(tmp)`` on a fresh temporary sibling of ``out_dir``, then renamed to it (nothing left if ``fill``
    raises); the absolute path. DataError if ``out_dir`` is a file, or non-empty without ``overwrite``."""
    out = Path(out_dir).expanduser().absolute()
    if out.is_symlink():
        raise DataError(f"{out} is a symbolic link; give the directory itself (a link is never replaced)")
    if out.exists() and not out.is_dir():
        raise DataError(f"{out} exists and is not a directory")
    replacing = _is_nonempty_dir(out)
    if replacing:
        _check_replaceable(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_temporaries(out)
    with ExitStack() as stack:
        if replacing and (out / LOCK_FILE).exists():  # a run has used it: wait for nobody, refuse while it runs
            stack.callback(RunLock(out).acquire().release)
        tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(out, "tmp"), dir=out.parent))
        try:
            fill(tmp)
            _write_marker(tmp)
            _move_into_place(tmp, out, overwrite)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return out


def _check_replaceable(out: Path, overwrite: bool) -> None:
    """Refuse, in one line, to write into the non-empty ``out`` unless it is a generated dataset and ``overwrite``."""
    if not is_generated_dataset(out):
        raise DataError(f"{out} is not empty and is not a dataset privreid generated (no {DATASET_MARKER}); "
                        "it is never replaced: choose a new or empty directory")
    if not overwrite:
        raise DataError(f"{out} exists and is not empty (pass --overwrite, overwrite=True, to replace it)")
    foreign = foreign_entry(out)
    if foreign is not None:
        raise DataError(f"{out} holds {foreign}, which privreid did not write; --overwrite deletes only the "
                        "files the dataset lists: move it out first")


def _move_into_place(tmp: Path, out: Path, overwrite: bool) -> None:
    if out.exists():
        if _is_nonempty_dir(out):
            if not overwrite:
                raise DataError(f"{out} was filled by someone else while generating")
            trash = Path(tempfile.mkdtemp(prefix=_temporary_prefix(out, "old"), dir=out.parent))
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


def ensure_cached(prefix: str, config, generate: Callable[[Path, bool], Path],
                  cache_root: str | os.PathLike | None = None, *, format_version: int = FORMAT_VERSION,
                  render_version: int = RENDER_VERSION) -> Path:
    """``cache_root / f"{prefix}-{config_hash(...)}"``, filled once by ``generate(path, overwrite)`` (a broken
    copy overwritten); valid when its manifest has the same config and versions; a concurrent winner is kept."""
    root = Path(cache_root).expanduser() if cache_root is not None else environment.cache_root()
    path = root / f"{prefix}-{config_hash(config, format_version, render_version)}"
    expected = json.loads(json.dumps(asdict(config)))  # as the manifest stores it (tuples become lists)

    def valid() -> bool:
        m = read_manifest(path)
        return (m is not None and m.get("config") == expected
                and m.get("format_version") == format_version
                and m.get("render_version") == render_version
                and m.get("person_render_version") == synthetic_config.RENDER_VERSION)

    if valid():
        return path
    try:
        generate(path, path.exists())
    except DataError:
        if valid():  # a concurrent process won the race
            return path
        raise
    return path
