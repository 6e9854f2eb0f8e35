"""What a reproducible table or figure is: its runs, its cells and its budgets (one module per paper uses these).

A :class:`TableSpec` with ``rows`` is runnable: each :class:`Row` is a privreid training run (``train``: its
:class:`RunSpec` per scale) or a comparator privreid lacks (``train`` ``None``: "not implemented"). ``columns`` map a
paper column to its test set per scale. Rows may share a run (``Row.run``), read another model of it (``Row.scope``)
or measure something else (``Row.measure``: attacks, corruptions, inversions); ``TableSpec.deviations`` are written
under the table. A spec without rows is listed but not runnable (``status``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from privreid.config import RunConfig, field_types, option_path
from privreid.config.values import parse_value
from privreid.errors import ConfigError

SCALES = ("smoke", "paper")
#: the paper presets (``--config`` files of ``privreid train``)
CONFIGS = Path(__file__).resolve().parents[3] / "configs"
#: smoke-scale training budget shared by every run (tiny images and steps: exercises the code path only)
SMOKE_TRAIN = {"federation.rounds": 1, "data.height": 32, "data.width": 16, "model.feat_dim": 32, "optim.batch_size": 8,
               "optim.max_steps_per_epoch": 2, "evaluation.every": 1, "runtime.device": "cpu"}
#: what every smoke-scale run of SMOKE_TRAIN costs (said in each table's smoke budget)
SMOKE_BUDGET = "1 round, 32x16"

#: the four source domains of FedReID and SKA at paper scale: --data-root folder -> format
RGB_SOURCES = {"dukemtmcreid": "dukemtmcreid", "market1501": "market1501", "cuhk03np": "cuhk03np-detected",
               "msmt17": "msmt17-train"}  # FedReID Table I / SKA: MSMT17's 30,248 train images, without val
RGB_SOURCES_TEXT = "Duke+Market+CUHK03+MSMT17"


def data_roots(folders: dict[str, str]) -> list[str]:
    """``{data_root}/<folder>:<format>`` for each paper-scale folder (each root in its own layout)."""
    return [f"{{data_root}}/{folder}:{fmt}" for folder, fmt in folders.items()]


@dataclass(frozen=True)
class RunSpec:
    """One training run of a table at one scale: a paper preset of ``configs/`` (``None``: privreid's defaults),
    then ``fields`` by their ``--set`` paths, each replacing the preset's value (a mapping whole, as
    ``--opt`` does); ``{data_root}`` and ``{device}`` in a text are filled in when the run is built."""

    fields: dict[str, Any]
    preset: Optional[str] = None

    def config(self, data_root: Any = None, device: str = "auto", seed: int | None = None) -> RunConfig:
        """The run's :class:`RunConfig` (not validated yet), with ``seed`` where given."""
        config = preset_config(CONFIGS / self.preset) if self.preset else RunConfig()
        return config.with_values(self.filled(data_root, device) | ({} if seed is None else {"runtime.seed": seed}))

    def filled(self, data_root: Any, device: str) -> dict[str, Any]:
        """``fields`` with ``{data_root}`` / ``{device}`` filled in."""
        def fill(value):
            if isinstance(value, str):
                return value.format(data_root=data_root, device=device)
            if isinstance(value, list):
                return [fill(v) for v in value]
            return {k: fill(v) for k, v in value.items()} if isinstance(value, dict) else value

        return {path: fill(value) for path, value in self.fields.items()}

    def train_args(self, data_root: Any = None, device: str = "auto") -> list[str]:
        """The ``privreid train`` options that configure the same run (``reproduce --dry-run`` prints them)."""
        preset = ["--config", str(CONFIGS / self.preset)] if self.preset else []
        return preset + [a for path, value in self.filled(data_root, device).items() for a in (
            "--set", f"{path}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}")]

    def at(self, device: str) -> "RunSpec":
        """A smoke run on ``device`` (``auto``: where its fields say, the CPU)."""
        return self if device == "auto" else RunSpec(self.fields | {"runtime.device": device}, self.preset)


def smoke(method: str, fields: dict[str, Any] | None = None, *, data: str = "synth", **options: Any) -> RunSpec:
    """A smoke-scale run: ``method`` on the synthetic ``data`` at :data:`SMOKE_TRAIN`'s budget, with ``fields``
    and method ``options``."""
    return RunSpec({"federation.method": method, "data.roots": [data], **SMOKE_TRAIN, **(fields or {}),
                    **({"federation.method_options": options} if options else {})})


def preset_config(path: Path) -> RunConfig:
    """The configuration of a ``privreid train --config`` preset (keys are its option names, ``lr-backbone``)."""
    import yaml

    config = RunConfig()
    for key, value in (yaml.safe_load(Path(path).read_text()) or {}).items():
        path_ = option_path(key)
        if path_ is None:
            raise ConfigError(f"{path}: unknown option {key!r}")
        section, name = path_.split(".")
        setattr(getattr(config, section), name, parse_value(value, field_types(section)[name]))
    return config


@dataclass(frozen=True)
class Column:
    """A column of the paper: ``name`` as printed, and what fills it at each scale.

    ``source``: ``("dg", format)``: the DG-ReID protocol (``*-crosscam``: FedPav's cross-camera one) on the
    global model; ``("seen", metric)``: the global model's mean over the run's seen test sets (``summary.json``);
    ``("local", metric)``: the personalised model(s) on the named seen test set; ``("global", metric)``: the
    global model on the named test set as the run reports it (its ``best`` block); ``("mean", metric)``: the
    mean of the columns in ``of`` (FedARKS' SAvg). A row's ``scope`` replaces ``local`` / ``global``.
    ``smoke`` / ``paper`` name the dataset per scale (``None``: the cell stays empty)."""

    name: str
    source: tuple[str, str]
    smoke: str | None
    paper: str | None
    #: the run group that fills the column (L2RW+ Table VII: one run per dataset and row)
    group: str = ""
    #: the DG protocol's metric a "dg" column shows (one evaluation per run and dataset fills them all)
    metric: str = "rank1"
    #: a "mean" column: the columns it averages
    of: tuple[str, ...] = ()
    #: decimals table.md prints (L2RW+ Fig. 8's cosines and SSIMs need more than the percentages' one)
    decimals: int = 1


@dataclass(frozen=True)
class Row:
    name: str
    #: run group -> scale -> the run (None: no run at that scale); None: a comparator privreid does not implement
    train: dict[str, dict[str, RunSpec | None]] | None = None
    #: "local" / "global": which model of the run fills this row's local / global columns (FedPav Table 3)
    scope: Optional[str] = None
    #: the run directory's name when rows share a run (default: the row's name)
    run: Optional[str] = None
    #: L2RW+ Table IX: what this row measures on the column's run and test set instead of the column's source:
    #: ("attack" | "attack-clean" | "attack-drop", attack name) or ("corruption" | "corruption-clean" |
    #: "corruption-drop", ""); the metric is the column's (a drop is 100 * (clean - attacked) / clean);
    #: L2RW+ Fig. 8: ("inversion" | "inversion-random", modality), the column's metric of the reconstruction of
    #: that modality's subject (or of its random start), see :mod:`privreid.experiments.reproduce.leakage`
    measure: Optional[tuple[str, str]] = None

    def run_name(self, group: str) -> str:
        name = self.run or self.name
        return name if not group else f"{group}-{name}"

    def trains(self, column: Column, scale: str) -> bool:
        """Whether the cell of ``column`` trains this row's run at ``scale`` (it has a run and data there)."""
        return (self.train or {}).get(column.group, {}).get(scale) is not None and getattr(column, scale) is not None


@dataclass(frozen=True)
class TableSpec:
    key: str
    paper: str
    title: str
    shows: str
    #: scale -> the cost of one run and of the table, without the number of runs (:meth:`budget` counts them)
    cost: dict[str, str]
    columns: tuple[Column, ...] = ()
    rows: tuple[Row, ...] = ()
    #: paper-scale training data: --data-root folder -> format (checked before any work)
    paper_train: dict[str, str] = field(default_factory=dict)
    status: str = "runs"
    #: the paper's figure, drawn from the written rows into OUT/figure.png (None: the paper has none)
    figure: Optional[Callable] = None
    #: a run every cell is shown relative to (FedPav Table 4: the increase over standalone training)
    reference: Optional[Row] = None
    #: the paper prints methods as columns and datasets as rows (FedPav Table 5): table.md does too
    transpose: bool = False
    #: where privreid's cells differ from the paper's protocol (written under the table)
    deviations: tuple[str, ...] = ()

    def run_groups(self, scale: str) -> dict[str, tuple[Row, str]]:
        """Run directory -> (row, group) of every run :func:`privreid.experiments.reproduce.run_table` trains at
        ``scale`` (the reference's included), sorted by name."""
        rows = self.rows + ((self.reference,) if self.reference is not None else ())
        found: dict[str, tuple[Row, str]] = {}
        for row in rows:
            for column in self.columns:
                if row.trains(column, scale):  # rows sharing a run: the first, as run_table trains it
                    found.setdefault(row.run_name(column.group), (row, column.group))
        return dict(sorted(found.items()))

    def runs(self, scale: str) -> list[str]:
        """The run directories :func:`privreid.experiments.reproduce.run_table` trains at ``scale``, reference's too."""
        return list(self.run_groups(scale))

    def budget(self, scale: str) -> str:
        """``cost[scale]`` after the number of runs."""
        n = len(self.runs(scale))
        parts = [f"{n} run" + ("s" if n != 1 else ""), *([SMOKE_BUDGET] if scale == "smoke" else []), self.cost[scale]]
        return ", ".join(parts)
