"""``privreid reproduce``: run every cell of a paper's table and write it beside the published numbers.

:data:`TABLES` lists the tables; ``published.yaml`` holds the papers' numbers. :func:`run_table` trains every run
into ``OUT/runs/<run>/`` (as ``sweep``), evaluates every cell (cached beside the run), and writes ``OUT/table.md`` /
``table.csv`` (and ``figure.png``) in the paper's layout: privreid's number, the published one, their difference;
comparators privreid lacks stay as "not implemented" rows. ``scale="smoke"``: synthetic data, tiny budgets, the
stand-ins of :mod:`privreid.data.synthetic_dg` (the code path, not comparable numbers). ``scale="paper"``: the paper
presets and the real datasets under ``data_root`` (one folder per ``--format`` name), refused up front if missing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import yaml

from privreid.config import RunConfig
from privreid.errors import ConfigError, DataError
from privreid.experiments.reproduce import fedarks, fedpav, fedreid, l2rw, ska
from privreid.experiments.reproduce.spec import SCALES, Column, Row, RunSpec, TableSpec
from privreid.experiments.executor import ExecutorSettings, PlannedRun, execute
from privreid.experiments.statistics import describe
from privreid.io import write_csv_rows, write_text_atomic

__all__ = ["TABLES", "check_table", "list_tables", "published", "run_table"]

#: every reproducible table and figure, by key, paper by paper
TABLES: dict[str, TableSpec] = {spec.key: spec for spec in (*fedreid.TABLES, *ska.TABLES, *fedpav.TABLES,
                                                            *fedarks.TABLES, *l2rw.TABLES)}


def published() -> dict[str, Any]:
    """The papers' numbers (``published.yaml``): table key -> rows of ``{row, label, values}``."""
    return yaml.safe_load((Path(__file__).with_name("published.yaml")).read_text())


def list_tables() -> list[dict[str, str]]:
    """One line per table: key, paper, title, what it shows, budget per scale, status."""
    return [{"table": s.key, "paper": s.paper, "title": s.title, "shows": s.shows, "smoke": s.budget("smoke"),
             "paper budget": s.budget("paper"), "status": s.status} for s in TABLES.values()]


def run_table(key: str, *, scale: str, out: str | os.PathLike, data_root: str | os.PathLike | None = None,
              device: str = "auto", seeds: list[int] | None = None, executor: ExecutorSettings | None = None,
              progress: bool = False, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run table ``key`` at ``scale`` into ``out``, once per seed of ``seeds`` (``None``: the runs' own seed);
    returns the rows written to ``table.csv``.  Runs are trained by :func:`~privreid.experiments.executor.execute`
    into ``OUT/runs/<run>/`` (``<run>-seed<k>`` for k != 0); each cell is the mean over the seeds with std, n and a
    95% interval (n >= 3); a failed run leaves its cells empty, counted in ``failed``. ``progress``: the executor's
    view."""
    spec = check_table(key, scale, data_root)
    out = Path(out)
    planned = plan_runs(spec, scale, data_root, device, seeds)
    for run in planned:
        if not (out / "runs" / run.name / "summary.json").is_file():
            echo(f"training {run.name} ({scale})")
    outcomes = execute(planned, out / "runs", executor or ExecutorSettings(), progress=progress)
    failed = {o.run.name for o in outcomes if o.status != "done"}
    for o in outcomes:
        if o.status != "done":
            echo(f"run {o.run.name} failed: {o.error}")
    per_seed = [_values(spec, scale, out, data_root, device, seed, failed) for seed in (seeds or [None])]
    lost = {(row.name, column.name): sum(run_dir_name(row.run_name(column.group), seed) in failed
                                         for seed in (seeds or [None]))
            for row in spec.rows for column in spec.columns if row.trains(column, scale)}
    rows = _rows(spec, per_seed, lost, several=len(per_seed) > 1)
    _write(spec, scale, rows, out)
    return rows


def run_dir_name(run: str, seed: int | None) -> str:
    """The directory of ``run`` for ``seed`` under ``OUT/runs``: the run's name for seed 0 (the table's run
    without --seeds), ``<run>-seed<k>`` for another."""
    return run if not seed else f"{run}-seed{seed}"


def plan_runs(spec: TableSpec, scale: str, data_root, device: str, seeds: list[int] | None) -> list[PlannedRun]:
    """Every run of the table at ``scale`` for each seed, its configuration validated before any run starts."""
    runs = []
    for seed in seeds or [None]:
        for name, (row, group) in spec.run_groups(scale).items():
            config = _run_spec(row, group, scale, device).config(data_root, device, seed).validate()
            runs.append(PlannedRun(run_dir_name(name, seed), config, {"run": name}, config.runtime.seed))
    return runs


def _run_spec(row: Row, group: str, scale: str, device: str) -> RunSpec:
    spec = row.train[group][scale]
    return spec.at(device) if scale == "smoke" else spec


def _values(spec: TableSpec, scale: str, out: Path, data_root, device: str, seed: int | None,
            failed: set[str]) -> dict[tuple[str, str], float | None]:
    """Every cell of one seed's runs: (row, column) -> privreid's number (None: no run, no data or failed)."""
    def cell(row: Row, column: Column) -> float | None:
        if not row.trains(column, scale):
            return None
        name = run_dir_name(row.run_name(column.group), seed)
        if name in failed:
            return None
        return _cell(row, column, scale, out / "runs" / name, data_root, device)

    values: dict[tuple[str, str], float | None] = {}
    measured = [c for c in spec.columns if c.source[0] != "mean"]
    for row in spec.rows:
        for column in measured:
            values[(row.name, column.name)] = cell(row, column)
    if spec.reference is not None:  # every cell relative to the reference run's
        for column in measured:
            ref = cell(spec.reference, column)
            for row in spec.rows:
                ours = values[(row.name, column.name)]
                values[(row.name, column.name)] = None if None in (ours, ref) else ours - ref
    for column in spec.columns:
        if column.source[0] == "mean":  # FedARKS' SAvg: the mean of other columns of the row
            for row in spec.rows:
                parts = [values[(row.name, name)] for name in column.of]
                values[(row.name, column.name)] = None if None in parts else sum(parts) / len(parts)
    return values


def check_table(key: str, scale: str, data_root, *, check_data: bool = True) -> TableSpec:
    """Table ``key``'s spec if it runs at ``scale`` (with ``data_root`` at paper scale); ConfigError if not.
    ``check_data=False`` (a dry run without ``--data-root``) skips the datasets."""
    if key not in TABLES:
        raise ConfigError(f"unknown table {key!r}; `privreid reproduce --list` names them: {', '.join(TABLES)}")
    spec = TABLES[key]
    if scale not in SCALES:
        raise ConfigError(f"--scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if not spec.rows:
        raise ConfigError(f"{key} is {spec.status}")
    if scale == "paper" and check_data:
        if data_root is None:
            raise ConfigError("--scale paper needs --data-root DIR (one folder per dataset, named by its --format)")
        from privreid.evaluation.dg_protocol import resolve_eval_format

        needed = dict(spec.paper_train) | {c.paper: resolve_eval_format(c.source[1])[0] for c in spec.columns
                                           if c.paper and c.source[0] == "dg"}
        for folder, fmt in needed.items():
            _check_dataset(Path(data_root) / folder, fmt)
    return spec


def _check_dataset(path: Path, fmt: str) -> None:
    """Refuse, naming the expected layout, when ``path`` does not hold a ``fmt`` dataset."""
    from privreid.data.formats import get_format, load_dataset
    from privreid.data.formats.dg import DG_FORMATS, load_pool

    layout = get_format(fmt)[0].layout
    if not path.is_dir():
        raise DataError(f"missing dataset {path.name}: expected {path} in the {fmt} layout: {layout}")
    try:
        load_pool(path, fmt) if fmt in DG_FORMATS else load_dataset(path, fmt)
    except DataError as exc:
        raise DataError(f"dataset {path} is not in the {fmt} layout ({layout}): {exc}") from None


def _cell(row: Row, column: Column, scale: str, run_dir: Path, data_root, device: str) -> float | None:
    """One cell of ``row`` in ``column``, measured on the trained run in ``run_dir``."""
    dataset = getattr(column, scale)
    if row.measure is not None and row.measure[0].startswith("inversion"):  # L2RW+ Fig. 8
        from privreid.experiments.reproduce.leakage import inversion_cell

        return inversion_cell(run_dir, row.measure, column.source[1], device)
    if row.measure is not None:
        return _robustness_cell(run_dir, row.measure, column.source[1], dataset, scale, device)
    kind, what = column.source
    if row.scope is not None and kind in ("local", "global"):
        kind = row.scope
    summary = json.loads((run_dir / "summary.json").read_text())
    if kind == "seen":
        metrics = summary.get("global_seen") or summary.get("local_seen") or {}
        return None if metrics.get(what) is None else 100 * metrics[what]
    if kind == "global":  # as the run reports its global model: the ``best`` block (last or best-K evaluations)
        reported = summary.get("best") or summary
        metrics = (reported.get("global_seen_per_testset", {}) | reported.get("global_unseen_per_testset", {})
                   ).get(dataset)
        return None if metrics is None else 100 * metrics[what]
    if kind == "local":  # the personalised model of the client(s) holding this seen domain
        found = [m[what] for key, m in summary.get("local_seen_per_testset", {}).items()
                 if key.split("@")[-1] == dataset]
        return None if not found else 100 * sum(found) / len(found)
    name = dataset + ("-crosscam" if what.endswith("-crosscam") else "")
    return 100 * _cached_dg_evaluation(run_dir, summary, dataset, what, scale, data_root, device, name)[column.metric]


def _cached_dg_evaluation(run_dir: Path, summary: dict, dataset: str, fmt: str, scale: str, data_root, device: str,
                          name: str) -> dict:
    """The run's evaluation on DG benchmark ``dataset`` (``eval-<name>.json``, once per run; recomputed when it
    ranks otherwise than ``summary.json``'s ``evaluation`` block)."""
    cache = run_dir / f"eval-{name}.json"
    if not cache.is_file() or json.loads(cache.read_text()).get("evaluation") != summary.get("evaluation"):
        write_text_atomic(cache, json.dumps(_evaluate_dg(run_dir, dataset, fmt, scale, data_root, device, name)))
    return json.loads(cache.read_text())


#: the DG test protocols in words (privreid.data.formats.dg.splits)
PROTOCOL_WORDS = {"dg": "DG-ReID protocol (10 seeded splits, single-shot)",
                  "crosscam": "cross-camera protocol (every view-A image against every view-B image)",
                  "fixed": "fixed query and gallery", "g100": "TestG100 protocol"}


def _cell_ranking(column: Column) -> str:
    """How a cell of ``column`` is ranked, in words (``reproduce --dry-run``)."""
    kind, what = column.source
    if kind == "dg":
        from privreid.evaluation.dg_protocol import resolve_eval_format

        fmt, protocol = resolve_eval_format(what)
        return f"{fmt} under the {PROTOCOL_WORDS.get(protocol, protocol)}, the global model, with the run's metric, " \
               "flip and AP"
    if kind in ("seen", "global", "local"):
        return f"the run's {kind} evaluation (summary.json), with its metric, flip and AP"
    return f"{kind} {what}"


def plan_table(key: str, *, scale: str, data_root=None, device: str = "auto") -> dict[str, Any]:
    """``reproduce --dry-run``: table ``key``'s runs at ``scale`` with their :func:`~privreid.run_plan.run_plan`s,
    nothing trained or written; at paper scale without ``data_root`` paths hold ``DATA_ROOT`` and nothing is
    checked, with it every dataset is."""
    from privreid.composition import method_of
    from privreid.run_plan import run_plan

    spec = check_table(key, scale, data_root, check_data=data_root is not None or scale != "paper")
    root = "DATA_ROOT" if data_root is None else data_root
    runs = []
    for name, (row, group) in spec.run_groups(scale).items():
        run = _run_spec(row, group, scale, device)
        config = run.config(root, device)
        runs.append({"run": name, "train_args": run.train_args(root, device), **run_plan(config, method_of(config))})
    cells = [{"column": c.name, "test set": getattr(c, scale), "source": list(c.source),
              "ranking": _cell_ranking(c)} for c in spec.columns if c.source[0] != "mean"]
    return {"table": key, "scale": scale, "runs": runs, "cells": cells,
            "table_deviations": list(spec.deviations)}


def _robustness_cell(run_dir: Path, measure: tuple[str, str], metric: str, dataset: str, scale: str,
                     device: str) -> float | None:
    """L2RW+ Table IX: the run's global model under an attack or CIL-ReID corruptions (cached next to the run)."""
    from privreid.retrieval_attacks.retrieval import relative_drop

    kind, what = measure
    family = kind.split("-")[0]
    cache = run_dir / (f"attack-{what}-{dataset}.json" if family == "attack" else f"corruption-{dataset}.json")
    if not cache.is_file():
        write_text_atomic(cache, json.dumps(_evaluate_robustness(run_dir, family, what, dataset, scale, device)))
    result = json.loads(cache.read_text())
    if family == "attack":
        clean, attacked = result[f"clean_{metric}"], result[metric]
    else:
        clean, attacked = result["clean"][metric], result["mean"][metric]
    if kind.endswith("-drop"):
        drop = relative_drop(clean, attacked)
        return None if drop is None else 100 * drop
    return 100 * (clean if kind.endswith("-clean") else attacked)


def _evaluate_robustness(run_dir: Path, family: str, attack: str, dataset: str, scale: str, device: str) -> dict:
    from privreid.retrieval_attacks.retrieval import evaluate_under_attack
    from privreid.data.catalog import resolve_datasets
    from privreid.data.partition import as_test_set
    from privreid.evaluation.corrupted_eval import evaluate_corrupted
    from privreid.experiments.reproduce.l2rw import TABLE9_SMOKE_REPEATS

    cfg, model, dev = _global_model(run_dir, device)
    datasets = resolve_datasets(cfg.data.roots, cfg.data.format, synth_seed=cfg.data.synth_seed)
    testset = as_test_set(dataset, datasets[dataset])
    size = {"height": cfg.data.height, "width": cfg.data.width}
    if family == "attack":
        return evaluate_under_attack(model, testset, method=attack, device=dev, **size).record(testset=dataset)
    result = evaluate_corrupted(model, testset, repeats=TABLE9_SMOKE_REPEATS if scale == "smoke" else 10,
                                device=dev, **size)
    return {k: result[k] for k in ("clean", "mean", "std", "corruptions", "severity", "corrupt", "pixel_scale",
                                   "deviations")}


def _global_model(run_dir: Path, device: str) -> tuple[RunConfig, Any, Any]:
    """The run's configuration, its global model (``ckpt.pt``) on ``device``, and that device."""
    from privreid.checkpoint import Checkpoint
    from privreid.device import resolve_device

    ckpt, dev = Checkpoint.load(run_dir / "ckpt.pt"), resolve_device(device)
    return ckpt.run_config, ckpt.load_model(device=dev), dev


def _evaluate_dg(run_dir: Path, dataset: str, fmt: str, scale: str, data_root, device: str, name: str) -> dict:
    from privreid.data.synthetic_dg import ensure_synthetic_dg
    from privreid.evaluation.dg_protocol import evaluate_dg_model

    root = ensure_synthetic_dg() / dataset if scale == "smoke" else Path(data_root) / dataset
    cfg, model, dev = _global_model(run_dir, device)
    return evaluate_dg_model(model, root, fmt, height=cfg.data.height, width=cfg.data.width, device=dev,
                             flip=cfg.evaluation.flip, metric=cfg.evaluation.metric, ap=cfg.evaluation.ap,
                             write_splits_to=run_dir / f"splits-{name}.json")


def _rows(spec: TableSpec, per_seed: list[dict], lost: dict[tuple[str, str], int], *,
          several: bool) -> list[dict[str, Any]]:
    """One row per cell: privreid's number (the mean over seeds), the published one, their difference and the
    status ("failed" when every seed's run failed); with ``several`` seeds also ``std``, ``n``,
    ``ci95_low`` / ``ci95_high`` (n >= 3); ``failed``: the seeds whose run failed (with several seeds or any)."""
    numbers = published_by_row(spec.key)
    rows = []
    for row in spec.rows:
        for column in spec.columns:
            places = max(2, column.decimals)
            found = [values[(row.name, column.name)] for values in per_seed]
            stats = describe([v for v in found if v is not None])
            ours, paper = stats["mean"], numbers.get(row.name, {}).get(column.name)
            ours = None if ours is None else round(ours, places)
            cell = {"row": row.name, "column": column.name, "privreid": ours}
            if several:
                cell |= {k: None if stats.get(k) is None else round(stats[k], places)
                         for k in ("std", "ci95_low", "ci95_high")} | {"n": stats["n"]}
            failed = lost.get((row.name, column.name), 0)
            if several or failed:
                cell["failed"] = failed
            cell |= {"published": paper,
                     "difference": None if None in (ours, paper) else round(ours - paper, places),
                     "status": "not implemented" if row.train is None else "failed" if ours is None and failed
                     else "run"}
            rows.append(cell)
    return rows


def published_by_row(key: str) -> dict[str, dict[str, float]]:
    """Table ``key``'s published numbers as ``{row: {column: value}}`` in privreid's orientation (a transposed
    paper table, FedPav Table 5, is stored as the paper prints it: its lines are privreid's columns)."""
    table = published().get(key, {})
    numbers: dict[str, dict[str, float]] = {}
    for line in table.get("rows", []):
        if table.get("transposed"):
            for row, value in line["values"].items():
                numbers.setdefault(row, {})[line["row"]] = value
        else:
            numbers[line["row"]] = dict(line["values"])
    return numbers


def _write(spec: TableSpec, scale: str, rows: list[dict[str, Any]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_csv_rows(rows, out / "table.csv")
    by_cell = {(r["row"], r["column"]): r for r in rows}

    decimals = {c.name: c.decimals for c in spec.columns}

    def cell(r: dict) -> str:
        d = decimals[r["column"]]
        paper = "-" if r["published"] is None else f"{r['published']:.{d}f}"
        if r["status"] == "not implemented":
            return f"n/i ({paper})"
        if r["privreid"] is None:
            return f"{'failed' if r['status'] == 'failed' else '-'} ({paper})"
        diff = "" if r["difference"] is None else f", {r['difference']:+.{d}f}"
        ours = f"{r['privreid']:.{d}f}"
        if "n" in r:  # several seeds: mean ± std [95% interval] n
            interval = "" if r["ci95_low"] is None else f" [{r['ci95_low']:.{d}f}, {r['ci95_high']:.{d}f}]"
            ours += f" ± {r['std']:.{d}f}{interval} n={r['n']}"
        if r.get("failed"):
            ours += f", {r['failed']} failed"
        return f"{ours} ({paper}{diff})"

    names = [c.name for c in spec.columns]
    if spec.transpose:  # the paper's layout: one line per column of privreid's, one column per row
        head = ["Dataset", *[r.name for r in spec.rows]]
        body = [[name, *[cell(by_cell[(r.name, name)]) for r in spec.rows]] for name in names]
    else:
        head = ["Method", *names]
        body = [[r.name, *[cell(by_cell[(r.name, name)]) for name in names]] for r in spec.rows]
    legend = "Each cell: privreid (published, privreid - published); n/i = not implemented in privreid; "
    if rows and "n" in rows[0]:
        legend += ("privreid is the mean ± std over the seeds' runs [95% Student-t interval, n >= 3], n the runs "
                   "measured; ")
    legend += "- = no such data at this scale."
    if any(r.get("failed") for r in rows):
        legend += " failed = every seed's run failed (its error: the run directory)."
    if spec.reference:
        legend += (f" Every privreid cell is relative to the {spec.reference.name} run's (its increase over it), "
                   "as in the paper.")
    lines = [f"### {spec.paper}, {spec.title} ({scale} scale)", "", legend, "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(line) + " |" for line in body]
    if spec.deviations:
        lines += ["", "Deviations from the paper's protocol:", *[f"* {d}" for d in spec.deviations]]
    write_text_atomic(out / "table.md", "\n".join(lines) + "\n")
    if spec.figure is not None:
        spec.figure(spec, rows, out / "figure.png")
