"""The dataset formats: one registry of :class:`DatasetFormat` records, one module per layout.

Like fast-reid's ``DATASET_REGISTRY``, every layout is one :class:`DatasetFormat` (name, layout, ``detect``,
``load``) in :func:`available_formats`; ``--format auto`` (:func:`detect_format`), ``--help``, errors and docs
tables (:func:`format_table`) read it; :func:`register_format` adds one (docs/datasets.md, docs/extending.md).
Built in (:func:`_builtin_formats`): the large RGB benchmarks (:mod:`.market1501`, :mod:`.dukemtmcreid`,
:mod:`.cuhk03np`, :mod:`.msmt17`), parsed as torchreid parses them (junk dropped, distractors kept, cameras
0-based, ``train`` pids relabelled in sorted order, query / gallery pids kept); the small DG benchmarks
(:mod:`privreid.data.formats.dg`); the visible-infrared ones (:mod:`privreid.data.formats.vi`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from privreid.data.types import ReIDDataset
from privreid.errors import ConfigError, DataError
from privreid.registry import Registry

from privreid.data.formats.rgb import cuhk03np, dukemtmcreid, market1501, msmt17
from privreid.data.formats.base import (
    DETECT_FIRST,
    DETECT_LAST,
    DETECT_RELEASE,
    DETECT_SMALL,
    DETECT_USER,
    IMAGE_SUFFIXES,
    DatasetFormat,
    check_ids,
    check_root,
    make_dataset,
    read_image,
    read_market_folder,
    subfolder,
    verify_images,
)

__all__ = [
    "DATASET_FORMATS",
    "DETECT_FIRST",
    "DETECT_LAST",
    "DETECT_RELEASE",
    "DETECT_SMALL",
    "DETECT_USER",
    "FORMATS",
    "IMAGE_SUFFIXES",
    "DatasetFormat",
    "available_formats",
    "check_format_matches",
    "check_ids",
    "check_root",
    "detect_format",
    "format_choices",
    "format_help",
    "format_table",
    "formats_markdown",
    "get_format",
    "load_dataset",
    "make_dataset",
    "read_image",
    "read_market_folder",
    "register_format",
    "subfolder",
    "unregister_format",
    "verify_images",
]

_RGB = (market1501.FORMAT, dukemtmcreid.FORMAT, cuhk03np.FORMAT, msmt17.FORMAT)
#: the large RGB benchmarks' layouts (name -> one line), as docs/datasets.md lists them
DATASET_FORMATS: dict[str, str] = {fmt.name: fmt.layout for fmt in _RGB}


def _builtin_formats() -> list[DatasetFormat]:
    """The one table of built-in formats, in listing order (detection order is each format's ``priority``)."""
    from privreid.data.formats.dg import DG_FORMATS, dataset_format
    from privreid.data.formats.vi import VI_DATASET_FORMATS

    return [*_RGB, *(dataset_format(name) for name in DG_FORMATS), *VI_DATASET_FORMATS]


def _check_format(fmt: DatasetFormat) -> None:
    if not isinstance(fmt, DatasetFormat):
        raise ConfigError(f"register_format takes a DatasetFormat, got {type(fmt).__name__}")
    if fmt.name == "auto" or not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", fmt.name):
        raise ConfigError(f"invalid dataset format name {fmt.name!r} (lower-case letters, digits, '_' and '-')")


#: every dataset format by name, in listing order; the built-ins register when first used
FORMATS: Registry[DatasetFormat] = Registry("dataset format", builtins=_builtin_formats, check=_check_format)


def register_format(fmt: DatasetFormat, *, replace: bool = False) -> DatasetFormat:
    """Add ``fmt`` to the registry; returns it. ConfigError when the name is taken (``replace=True``
    overrides), is ``auto``, or is not lower-case letters, digits, ``_`` and ``-``."""
    return FORMATS.register(fmt, replace=replace)


def unregister_format(name: str) -> None:
    """Remove format ``name`` (tests; a built-in can be re-registered); unknown names are refused."""
    FORMATS.unregister(name)


def available_formats() -> dict[str, DatasetFormat]:
    """Every registered format, by name, in listing order."""
    return dict(FORMATS.items())


def format_choices() -> list[str]:
    """The ``--format`` values: ``auto`` then every format's spellings (``regdb``, ``regdb-<trial>``...)."""
    return ["auto", *(s for fmt in FORMATS.values() for s in fmt.spellings)]


def get_format(name: str) -> tuple[DatasetFormat, str | None]:
    """The format and the variant that ``--format name`` selects (``cuhk03np-labeled`` -> cuhk03np, ``labeled``).

    :class:`ConfigError` listing the choices for an unknown name.
    """
    if name in FORMATS:
        return FORMATS[name], None
    base, _, variant = name.rpartition("-")
    fmt = FORMATS[base] if base in FORMATS else None
    if fmt is not None and fmt.variant_pattern is not None and re.fullmatch(fmt.variant_pattern, variant):
        return fmt, variant
    raise FORMATS.unknown(name, format_choices())


def load_dataset(root: str | os.PathLike, name: str = "auto", *, variant: str | None = None) -> ReIDDataset:
    """Load the dataset at ``root`` in format ``name`` (registered, ``<name>-<variant>``, or ``"auto"``).

    ``variant`` selects e.g. CUHK03-NP's ``detected`` (default) or ``labeled`` images; ``ReIDDataset.name`` is
    the format name (with the variant), ``.root`` the folder read. ConfigError for an unknown name or variant,
    DataError for a missing, empty or malformed dataset.
    """
    if name == "auto":
        fmt = get_format(detect_format(root))[0]
    else:
        fmt, suffix = get_format(name)
        if suffix is not None:
            if variant is not None:
                raise ConfigError(f"format {name!r} already names a variant; do not also give variant={variant!r}")
            variant = suffix
    if variant is not None and fmt.variant_pattern is None:
        with_variants = [f.name for f in FORMATS.values() if f.variant_pattern is not None]
        raise ConfigError(f"variant={variant!r} only applies to {', '.join(with_variants)}, not to {fmt.name}")
    if name != "auto":
        check_format_matches(root, fmt)
    return fmt.load(Path(root), variant)


def check_format_matches(root: str | os.PathLike, fmt: DatasetFormat) -> None:
    """Refuse, in one line, a format ``root`` does not follow when another recognises it (formats without a
    detector, and roots none recognises, are left to the loader)."""
    if fmt.detect is None and fmt.loose_detect is None:
        return
    path = Path(root).expanduser().absolute()
    if not path.is_dir() or next(path.iterdir(), None) is None:
        return
    if any(detect is not None and detect(path) for detect in (fmt.detect, fmt.loose_detect)):
        return
    try:
        found = detect_format(path)
    except DataError:
        return
    if found != fmt.name:
        raise DataError(f"{path} looks like a {found} dataset, not {fmt.name}: give --format {found} (or "
                        f"DIR:{found}), or auto")


def detect_format(root: str | os.PathLike) -> str:
    """The registered format whose layout ``root`` follows, trying increasing :attr:`DatasetFormat.priority`
    (VI markers, release folders, small DG benchmarks, user formats, bare Market-1501 / DukeMTMC-reID folders).
    Two at the same priority are refused: a folder of several releases is not one dataset."""
    root = check_root(root)
    candidates = [(fmt.priority, fmt.name, fmt.detect) for fmt in FORMATS.values() if fmt.detect]
    candidates += [(DETECT_LAST, fmt.name, fmt.loose_detect) for fmt in FORMATS.values() if fmt.loose_detect]
    for priority in sorted({p for p, _, _ in candidates}):
        found = sorted(name for p, name, detect in candidates if p == priority and detect(root))
        if len(found) > 1:
            raise DataError(f"{root} holds several datasets ({', '.join(found)}); give the root of one of them")
        if found:
            return found[0]
    layouts = "; ".join(f"{fmt.name}: {fmt.layout}" for fmt in FORMATS.values())
    raise DataError(f"cannot recognise the dataset layout of {root}; expected one of: {layouts}")


def format_table(families: tuple[str, ...] | None = None) -> str:
    """A Markdown list of the registered formats (``* `name`: layout``), optionally of some families only.

    docs/datasets.md's "Preparing real datasets" list is this table for the ``rgb`` family.
    """
    return "\n".join(f"* `{fmt.name}`: {fmt.layout}" for fmt in FORMATS.values()
                     if families is None or fmt.family in families)


_FAMILY_TITLES = {"rgb": "", "dg": "small DG benchmarks: ", "vi": "visible-infrared: ", "video": "video: ",
                  "user": "user formats: "}


def format_help() -> str:
    """The ``--format`` values grouped by family, for ``--help`` (``auto; market1501, ...; video: ...``)."""
    groups: dict[str, list[str]] = {}
    for fmt in FORMATS.values():
        groups.setdefault(fmt.family, []).extend(fmt.spellings)
    return "; ".join(["auto", *(_FAMILY_TITLES.get(family, f"{family}: ") + ", ".join(names)
                                for family, names in groups.items())])


def formats_markdown() -> str:
    """``docs/formats.md``: every registered format, generated from the registry (a test keeps the file in sync)."""
    return "\n".join([
        "# Dataset formats",
        "",
        "<!-- generated by privreid.data.formats.formats_markdown(); do not edit by hand -->",
        "",
        "`--format` values (`--format auto`, the default, recognises every format that has a detector): "
        f"{format_help()}.",
        "",
        "Small DG benchmarks: [datasets.md](datasets.md); visible-infrared and video: "
        "[vi-datasets.md](vi-datasets.md); your own layout: [extending.md](extending.md).",
        "",
        format_table(),
        "",
    ])
