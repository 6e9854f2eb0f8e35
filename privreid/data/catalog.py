"""Turn ``--data`` arguments into named datasets and a federation.

Each ``--data`` value is ``synth`` (or nothing; the cached synthetic federation,
:func:`privreid.data.synthetic.ensure_synthetic`), ``synth-vi`` / ``synth-vi-video``
(:func:`privreid.data.synthetic_vi.ensure_synthetic_vi`), a ``privreid data synth`` directory (one dataset per
domain or entity), a dataset root in a registered layout (:func:`privreid.data.formats.available_formats`; named
after the directory), or a directory of dataset roots. ``DIR:FORMAT`` names a root's layout, else ``--format``
(``auto`` detects each root), so one federation mixes layouts (FedPav's nine clients: :func:`parse_data_spec`).
The embedded synthetic federation holds out its last domain as the unseen one when no domains are named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from privreid.errors import ConfigError, DataError
from privreid.data.formats import format_choices, get_format, load_dataset, verify_images
from privreid.data.holdout import apply_audit_holdout
from privreid.data.partition import make_federation
from privreid.data.types import Federation, ReIDDataset
from privreid.data.formats.vi import frame_dataset

SYNTH = "synth"
SYNTH_VI = "synth-vi"
SYNTH_VI_VIDEO = "synth-vi-video"
SYNTH_DG = "synth-dg"
_EMBEDDED = (SYNTH, SYNTH_VI, SYNTH_VI_VIDEO)


def _load_synthetic_root(root: Path) -> dict[str, ReIDDataset]:
    manifest = json.loads((root / "manifest.json").read_text())
    if manifest.get("format") == "privreid-synthetic-dg":
        from privreid.data.synthetic_dg import load_standins

        return load_standins(root)
    fmt = "vi-folders" if manifest.get("format") == "privreid-synthetic-vi" else "market1501"
    return {name: _named(load_dataset(root / name, fmt), name) for name in manifest["domains"]}


def _named(ds: ReIDDataset, name: str) -> ReIDDataset:
    ds.name = name
    return ds


@dataclass(frozen=True)
class DataSpec:
    """One ``--data`` value: the root, and the format given with it (``None``: ``--format``'s)."""

    root: str
    format: str | None = None


def _is_format(name: str) -> bool:
    try:
        return name == "auto" or get_format(name) is not None
    except ConfigError:
        return False


def parse_data_spec(spec: str) -> DataSpec:
    """``DIR:FORMAT`` -> ``DataSpec(DIR, FORMAT)`` when the suffix is ``auto`` or a registered spelling
    (:func:`privreid.data.formats.format_choices`); otherwise a path containing ``:``, which must exist (else a
    one-line ConfigError). The embedded synthetic datasets take no format."""
    root, colon, suffix = spec.rpartition(":")
    if not colon:
        return DataSpec(spec)
    if _is_format(suffix):
        if root in (*_EMBEDDED, SYNTH_DG):
            raise ConfigError(f"--data {spec}: the embedded dataset {root!r} takes no :FORMAT")
        return DataSpec(root, suffix)
    if Path(spec).expanduser().exists():
        return DataSpec(spec)
    raise ConfigError(f"--data {spec}: {suffix!r} is not a dataset format (DIR:FORMAT; choose one of: "
                      f"{', '.join(format_choices())}) and {spec} is not a directory")


@dataclass
class LoadedDataset:
    """A dataset of a federation: the ``--data`` value it came from and the format that read it."""

    dataset: ReIDDataset
    spec: str
    #: the loader's name for the dataset (its format spelling: ``market1501``, ``cuhk03np-detected``,
    #: ``prid-fedpav``; ``synthetic`` for the embedded and generated data)
    format: str


def resolve_datasets(roots: list[str] | None, fmt: str = "auto", synth_seed: int = 0) -> dict[str, ReIDDataset]:
    """Load every dataset named by ``roots`` (see module docstring)."""
    return {name: loaded.dataset for name, loaded in load_datasets(roots, fmt, synth_seed).items()}


def load_datasets(roots: list[str] | None, fmt: str = "auto", synth_seed: int = 0) -> dict[str, LoadedDataset]:
    """:func:`resolve_datasets`, with each dataset's ``--data`` value and format (``privreid data info``)."""
    from privreid.data.synthetic import SynthConfig, ensure_synthetic
    from privreid.data.synthetic_vi import SynthVIConfig, ensure_synthetic_vi

    roots = list(roots or [SYNTH])
    out: dict[str, LoadedDataset] = {}
    for text in roots:
        spec = parse_data_spec(text)
        formats: dict[str, str] = {}
        if spec.root == SYNTH:
            found = _load_synthetic_root(ensure_synthetic(config=SynthConfig(seed=synth_seed)))
        elif spec.root == SYNTH_DG:  # the small unseen-domain stand-ins (privreid.data.synthetic_dg)
            from privreid.data.synthetic_dg import SynthDGConfig, ensure_synthetic_dg

            found = _load_synthetic_root(ensure_synthetic_dg(config=SynthDGConfig(seed=synth_seed)))
        elif spec.root in (SYNTH_VI, SYNTH_VI_VIDEO):
            config = SynthVIConfig(seed=synth_seed, video=spec.root == SYNTH_VI_VIDEO)
            found = _load_synthetic_root(ensure_synthetic_vi(config=config))
        else:
            root = Path(spec.root).expanduser()
            if not root.exists():
                raise DataError(f"dataset directory not found: {root}")
            if not root.is_dir():
                raise DataError(f"not a directory: {root}")
            if (root / "manifest.json").is_file() and spec.format is None:
                found = _load_synthetic_root(root)
            else:
                found, formats = _load_dataset_or_children(root, spec.format or fmt)
        for name, ds in found.items():
            if name in out:
                raise ConfigError(f"two datasets are named {name!r}; rename one of the directories")
            out[name] = LoadedDataset(ds, text, formats.get(name, "synthetic"))
    return out


def _load_dataset_or_children(root: Path, fmt: str) -> tuple[dict[str, ReIDDataset], dict[str, str]]:
    """``root`` as one dataset, or (``fmt`` auto) its sub-directories as datasets; with each one's format."""
    try:
        found = {root.name: load_dataset(root, fmt)}
    except DataError as first_error:
        if fmt != "auto":
            raise
        found = {}
        for child in sorted(p for p in root.iterdir() if p.is_dir()):
            try:
                found[child.name] = load_dataset(child, "auto")
            except DataError:
                continue
        if not found:
            raise first_error
    formats = {name: ds.name for name, ds in found.items()}
    return {name: _named(ds, name) for name, ds in found.items()}, formats


def verify_datasets(datasets: dict[str, ReIDDataset], splits: tuple[str, ...] = ("train", "query", "gallery")) -> None:
    """Check every image (and tracklet frame) of ``splits`` of every dataset: :class:`DataError` names the first
    corrupt, empty or cut-short file and their count (``privreid train``, ``eval`` (its query and gallery),
    ``data info`` and ``flower supernode`` call it first)."""
    for ds in datasets.values():
        verify_images(frame_dataset(ds), splits=splits)


def build_federation(roots: list[str] | None, *, fmt: str = "auto", protocol: str = "by-dataset",
                     train_domains: list[str] | None = None, test_domains: list[str] | None = None,
                     num_clients: int | None = None, seed: int = 0, synth_seed: int = 0,
                     verify: bool = False, audit_holdout: float = 0.0) -> Federation:
    """Datasets -> federation; the synthetic default holds out its last domain. ``verify`` checks every image
    header first (:func:`verify_images`); ``audit_holdout`` keeps that fraction of each client's training
    images out (:func:`apply_audit_holdout`)."""
    datasets = resolve_datasets(roots, fmt, synth_seed)
    if verify:
        verify_datasets(datasets)
    using_synth = not roots or (len(roots) == 1 and roots[0] in _EMBEDDED)
    if using_synth and train_domains is None and test_domains is None:
        names = list(datasets)
        test_domains = names[-1:]
    federation = make_federation(datasets, protocol, train_domains=train_domains, test_domains=test_domains,
                                 num_clients=num_clients, seed=seed)
    return apply_audit_holdout(federation, audit_holdout, seed) if audit_holdout else federation


def federation_for_config(config, *, verify: bool = False) -> Federation:
    """The federation a :class:`privreid.config.RunConfig` describes (its data section and seed)."""
    d = config.data
    return build_federation(d.roots, fmt=d.format, protocol=d.protocol, train_domains=d.train_domains,
                            test_domains=d.test_domains, num_clients=d.num_clients, seed=config.runtime.seed,
                            synth_seed=d.synth_seed, verify=verify, audit_holdout=d.audit_holdout)
