"""``privreid reproduce``: regenerate a paper table (training runs and evaluations) beside its published numbers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click
import typer

from privreid.errors import ConfigError
from privreid.commands.common import DeviceOption, fail, run_dir_or_exit, run_or_exit


def reproduce_command(
    table: Optional[str] = typer.Argument(None, help="The table to run (see --list), e.g. fedreid-table2."),
    list_tables: bool = typer.Option(False, "--list", help="Name every reproducible table and figure, with its "
                                     "paper, what it shows and its budget at each scale."),
    scale: str = typer.Option("smoke", "--scale", help="smoke (synthetic data, tiny budgets: exercises the code "
                              "path) or paper (the paper presets and the real datasets under --data-root)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Paper scale: one folder per dataset, "
                                             "named by its --format (e.g. DIR/viper, DIR/market1501)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output: runs/, table.md, table.csv (resumable)."),
    device: DeviceOption = "auto",
    dry_run: bool = typer.Option(False, "--dry-run", help="Train and write nothing: print each run's plan (as "
                                 "`privreid train --dry-run`) and the table's cells; at paper scale --data-root "
                                 "is then optional (given, its datasets are checked)."),
    as_json: bool = typer.Option(False, "--json", help="With --dry-run: print the plan as one JSON object."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated training seeds, e.g. 0,1,2: one run "
                                        "per seed, each cell the mean ± std over them (n; a 95% interval from 3)."),
    executor: str = typer.Option("local", "--executor", click_type=click.Choice(["local", "ray"]), help="local (one run after another) or ray (Ray Tune "
                                 "trials; RAY_ADDRESS joins a cluster)."),
    max_concurrent: int = typer.Option(1, "--max-concurrent", help="ray: runs at the same time."),
    cpus_per_run: float = typer.Option(1, "--cpus-per-run", help="ray: CPUs per run."),
    gpus_per_run: float = typer.Option(0, "--gpus-per-run", help="ray: GPUs per run (a fraction packs runs)."),
    retries: int = typer.Option(1, "--retries", help="Tries again a failed run this many times, then marks it "
                                "failed (the other runs go on)."),
) -> None:
    """Run every cell of a paper's table and write table.md / table.csv beside the published numbers.

    Resumable: finished runs and evaluations are skipped, interrupted runs resumed.

    Example: privreid reproduce --list
    Example: privreid reproduce fedreid-table2 --scale smoke --out runs/fedreid-table2
    Example: privreid reproduce fedpav-table4 --scale paper --dry-run
    Example: privreid reproduce fedreid-fig3 --seeds 0,1,2 --executor ray --max-concurrent 2 --out runs/fig3
    """
    from privreid.experiments.reproduce import list_tables as rows_of_list
    from privreid.experiments.reproduce import check_table, run_table
    from privreid.experiments.executor import ExecutorSettings

    if list_tables:
        if table is not None or dry_run or as_json or out is not None:
            fail("--list names every table; it takes no TABLE, --out, --dry-run or --json")
        for r in rows_of_list():
            typer.echo(f"{r['table']:15s} {r['paper']}: {r['title']}")
            typer.echo(f"{'':15s}   shows: {r['shows']}")
            typer.echo(f"{'':15s}   smoke: {r['smoke']}; paper: {r['paper budget']}")
            if r["status"] != "runs":
                typer.echo(f"{'':15s}   status: {r['status']}")
        return

    if dry_run or as_json:
        run_or_exit(_dry_run, table, scale, data_root, device, dry_run, as_json)
        return

    def go():
        if table is None:
            raise ConfigError("name a table (privreid reproduce --list shows them)")
        check_table(table, scale, data_root)  # a misspelt table is named before a missing --out
        if out is None:
            raise ConfigError("--out is required")
        settings = ExecutorSettings(executor, max_concurrent, cpus_per_run, gpus_per_run, retries)
        settings.check()
        return run_table(table, scale=scale, out=out, data_root=data_root, device=device, echo=typer.echo,
                         seeds=parse_seeds(seeds), executor=settings, progress=sys.stderr.isatty())

    with run_dir_or_exit(out, "reproduce"):
        rows = run_or_exit(go)
        typer.echo((out / "table.md").read_text())
        typer.echo(f"wrote {out / 'table.md'} and {out / 'table.csv'}")
        failed = sorted({r["row"] for r in rows if r.get("failed")})
        if failed:
            fail(f"runs failed for {', '.join(failed)}: their cells are marked in the table", 1)


def parse_seeds(text: Optional[str]) -> Optional[list[int]]:
    """``--seeds 0,1,2`` as distinct integers in 0..2**32 - 1 (None: not given); ConfigError in one line."""
    from privreid.config import MAX_SEED

    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise ConfigError(f"--seeds takes comma-separated integers, e.g. 0,1,2 (got {text!r})") from None
    if len(set(seeds)) != len(seeds) or not all(0 <= s <= MAX_SEED for s in seeds):
        raise ConfigError(f"--seeds must be distinct integers in 0..{MAX_SEED} (got {text!r})")
    return seeds


def _dry_run(table: Optional[str], scale: str, data_root: Optional[Path], device: str, dry_run: bool,
             as_json: bool) -> None:
    import json

    from privreid.experiments.reproduce import plan_table
    from privreid.run_plan import render_plan

    if not dry_run:
        raise ConfigError("--json prints the plan of --dry-run; give both")
    if table is None:
        raise ConfigError("name a table (privreid reproduce --list shows them)")
    plan = plan_table(table, scale=scale, data_root=data_root, device=device)
    if as_json:
        typer.echo(json.dumps(plan, indent=2))
        return
    typer.echo(f"{plan['table']} at {scale} scale: {len(plan['runs'])} run(s)")
    for run in plan["runs"]:
        typer.echo(f"\n== run {run['run']}: privreid train {' '.join(run['train_args'])}")
        typer.echo(render_plan(run))
    typer.echo("\ncells:")
    for cell in plan["cells"]:
        typer.echo(f"  {cell['column']}: {cell['test set']}: {cell['ranking']}")
    for text in plan["table_deviations"]:
        typer.echo(f"table deviation: {text}")
