"""``privreid sweep``: one training run per value of a privacy knob, then utility and leakage plots."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.dependencies import require
from privreid.errors import ConfigError
from privreid.commands.common import DeviceOption, fail, run_dir_or_exit, run_or_exit

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
    param: str = typer.Option(..., "--param", help="The knob: beta, noise-multiplier, target-epsilon or clip."),
    values: str = typer.Option(..., "--values", help="Comma-separated knob values, e.g. 0,0.01,0.1."),
    out: Path = typer.Option(..., "--out", help="Sweep directory: one run per value in OUT/<param>=<value>/, "
                                                "OUT/reference/, sweep.csv, sweep.png."),
    leakage: bool = typer.Option(True, "--leakage/--no-leakage", help="Also measure inversion leakage and mAP "
                                 "under PGD for every run."),
    subjects: int = typer.Option(2, help="Inversion subjects per run (the same images for every run)."),
    iterations: int = typer.Option(100, help="Inversion iterations."),
    max_queries: Optional[int] = typer.Option(100, help="Queries attacked by PGD per run."),
    device: DeviceOption = "auto",
    quiet: bool = typer.Option(False, help="No training progress bars."),
) -> None:
    """Sweep a privacy knob: train one run per value (plus a non-private reference), plot utility and leakage.

    All other options are passed to `privreid train` (method, data, rounds, --dp-sgd / --client-dp, ...).
    Resumable: finished runs are skipped, interrupted runs resumed.

    Example: privreid sweep --param noise-multiplier --values 0.5,1,2 --out runs/sweep --method fedpav --rounds 5 --dp-sgd
    """
    from privreid.federated.registry import get_method
    from privreid.experiments.sweep import LeakageSettings, parse_values, run_sweep

    def go():
        if leakage:
            require("torchattacks")  # fail before the reference run is trained
        base = base_config(ctx.args)
        get_method(base.train.method)  # before the sweep directory gets its first run
        settings = LeakageSettings(enabled=leakage, subjects=subjects, iterations=iterations, max_queries=max_queries)
        if subjects < 1 or iterations < 1:
            raise ConfigError("--subjects and --iterations must be >= 1")
        return run_sweep(base, param, parse_values(values), out, leakage=settings, device=device,
                         progress=not quiet, echo=typer.echo)

    with run_dir_or_exit(out, "sweep"):
        rows = run_or_exit(go)
        if rows is None:  # pragma: no cover - run_or_exit exits on errors
            fail("sweep failed")
        _print(rows, out)


def _print(rows: list[dict], out: Path) -> None:
    from privreid.io import format_table

    def display(r: dict) -> dict:
        row = {"run": r["run"], "epsilon": "-" if r["epsilon"] is None else f"{r['epsilon']:.2f}"}
        row.update({k: r[k] for k in ("seen R1", "seen mAP", "unseen R1", "unseen mAP", "PGD mAP") if k in r})
        if "inversion PSNR" in r:
            row["inversion PSNR (dB)"] = f"{r['inversion PSNR']:.2f}"
        return row

    typer.echo(format_table([display(r) for r in rows]))
    typer.echo(f"wrote {out / 'sweep.csv'} and {out / 'sweep.png'}")
