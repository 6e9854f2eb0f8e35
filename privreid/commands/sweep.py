"""``privreid sweep``: a grid of configuration values x seeds, one training run each, then utility, leakage,
their spread over seeds and the frontier."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.dependencies import require
from privreid.errors import ConfigError
from privreid.commands.common import DeviceOption, load_yaml_file, run_dir_or_exit, run_or_exit

#: what a sweep decides itself, so the pass-through train options may not set it
OWNED_TRAIN_OPTIONS = ("--out", "--resume", "--overwrite", "--quiet")


def base_config(train_args: list[str]):
    """The :class:`RunConfig` that ``privreid train <train_args>`` would run (presets and flags applied)."""
    import click

    from privreid.commands.common import params_with_preset
    from privreid.commands.train import train_command, train_config

    owned = [a for a in train_args if a.split("=")[0] in OWNED_TRAIN_OPTIONS]
    if owned:
        raise ConfigError(f"{', '.join(owned)}: the sweep sets these itself (use --out of the sweep)")
    single = typer.Typer()
    single.command("train")(train_command)
    train = typer.main.get_command(single)  # the train command alone (no import of privreid.cli)
    try:
        ctx = train.make_context("train", list(train_args))
    except click.UsageError as exc:
        raise ConfigError(f"train options: {exc.format_message()}") from None
    return train_config(params_with_preset(ctx, ctx.params["config_file"]))


def sweep_command(
    ctx: typer.Context,
    grid: list[str] = typer.Option([], "--grid", metavar="PATH=V1,V2", help="Sweep a configuration field as --set "
                                   "names it, e.g. privacy.beta=0,0.1 or federation.method=fedpav,fedavg (repeatable: the "
                                   "cross product)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds: every cell runs once per "
                                        "seed (tables give mean ± std, n, a 95% interval for n >= 3)."),
    sweep_file: Optional[Path] = typer.Option(None, "--sweep-file", help="YAML: grid: {PATH: [values]} and "
                                              "seeds: [...], instead of --grid/--seeds."),
    param: Optional[str] = typer.Option(None, "--param", help="One privacy knob as the grid: beta, "
                                        "noise-multiplier, target-epsilon or clip (with --values)."),
    values: Optional[str] = typer.Option(None, "--values", help="Comma-separated knob values, e.g. 0,0.01,0.1."),
    out: Path = typer.Option(..., "--out", help="Sweep directory: one run per cell and seed in OUT/<cell>[,seed=S]/, "
                                                "runs.json, sweep.csv, sweep_runs.csv, frontier.*, sweep.png."),
    executor: str = typer.Option("local", "--executor", help="local (one run after another) or ray (Ray Tune "
                                 "trials; RAY_ADDRESS joins a cluster)."),
    max_concurrent: int = typer.Option(1, "--max-concurrent", help="Ray: runs at a time."),
    gpus_per_run: float = typer.Option(0, "--gpus-per-run", help="Ray: GPUs per run (0.5 packs two on one GPU)."),
    cpus_per_run: float = typer.Option(1, "--cpus-per-run", help="CPUs per run (also its torch threads)."),
    retries: int = typer.Option(1, "--retries", help="Retries of a failing run before it is marked failed."),
    leakage: bool = typer.Option(True, "--leakage/--no-leakage", help="Also measure inversion leakage, mAP "
                                 "under PGD and membership TPR for every run."),
    subjects: int = typer.Option(2, help="Inversion subjects per run (the same images for every run)."),
    iterations: int = typer.Option(100, help="Inversion iterations."),
    max_queries: Optional[int] = typer.Option(100, help="Queries attacked by PGD per run."),
    device: DeviceOption = "auto",
    quiet: bool = typer.Option(False, help="No progress view."),
) -> None:
    """Sweep a grid of settings x seeds: one run each (plus a non-private reference when runs are private);
    tables and the frontier with mean ± std over seeds.

    All other options are passed to `privreid train` (method, data, rounds, --dp-sgd / --client-dp, ...).
    Resumable: finished runs are skipped, interrupted runs resumed (also after a kill -9: rerun the command).
    `privreid status OUT` shows where a sweep stands.

    Example: privreid sweep --grid privacy.beta=0,0.1 --seeds 0,1,2 --out runs/sweep --method fedreid --rounds 5
    Example: privreid sweep --param noise-multiplier --values 0.5,1,2 --out runs/sweep --method fedpav --dp-sgd
    """
    from privreid.experiments import sweep
    from privreid.experiments.executor import ExecutorSettings

    def go():
        settings = ExecutorSettings(executor, max_concurrent, cpus_per_run, gpus_per_run, retries)
        settings.check()
        loaded = None if sweep_file is None else (load_yaml_file(sweep_file, "--sweep-file"), str(sweep_file))
        grids, seed_list = sweep.sweep_arguments(grid, seeds, loaded, param, values)
        if leakage:
            require("torchattacks")  # fail before the first run is trained
        if subjects < 1 or iterations < 1:
            raise ConfigError("--subjects and --iterations must be >= 1")
        base = base_config(ctx.args)
        return sweep.run_sweep(base, grids, seed_list, out, knob=param, executor=settings, device=device,
                               leakage=sweep.LeakageSettings(enabled=leakage, subjects=subjects,
                                                             iterations=iterations, max_queries=max_queries),
                               progress=not quiet, echo=typer.echo)

    with run_dir_or_exit(out, "sweep"):
        rows, cells = run_or_exit(go)
        typer.echo(sweep.render_cells(cells))
        typer.echo(f"wrote {out / 'sweep.csv'} (per cell), {out / 'sweep_runs.csv'} (per run) and the frontier")
