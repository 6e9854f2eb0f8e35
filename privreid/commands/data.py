"""``privreid data``: write the synthetic datasets, print dataset statistics."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Optional

import typer

from privreid.data.formats import format_help
from privreid.signals import Signalled, raising_signals
from privreid.commands.common import run_or_exit

data_app = typer.Typer(help="Synthetic data and dataset statistics.", no_args_is_help=True)


@data_app.command("synth")
def data_synth(
    out: Path = typer.Option(..., help="Directory to write (must not exist or be empty)."),
    seed: int = typer.Option(0, help="Generator seed (output is deterministic for a seed)."),
    domains: Optional[int] = typer.Option(None, help="Number of domains (default: the demo's)."),
    height: Optional[int] = typer.Option(None, help="Image height (default 128; 64 with --vi / --video)."),
    width: Optional[int] = typer.Option(None, help="Image width (default 64; 32 with --vi / --video)."),
    vi: bool = typer.Option(False, "--vi", help="Visible-infrared entities (visible, infrared and dual cameras; "
                            "vi-folders layout) instead of RGB domains."),
    video: bool = typer.Option(False, "--video", help="Visible-infrared tracklets (one folder of frames of one "
                               "walk cycle per tracklet); implies --vi."),
    overwrite: bool = typer.Option(False, help="Replace a dataset written before by `data synth` (never a "
                                   "directory it did not write, nor one a run is using)."),
) -> None:
    """Write the synthetic multi-domain ReID dataset (Market-1501 layout per domain, or visible-infrared).

    The dataset is written into a hidden sibling folder and renamed into place at the end: a generation that
    fails or is stopped (Ctrl-C, SIGTERM) leaves nothing behind.

    Example: privreid data synth --out data/synth   (or: privreid data synth --vi --out data/synth-vi)
    """
    from privreid.api import synthesize

    try:
        with raising_signals(signal.SIGTERM):  # unwinds like Ctrl-C: the temporary folder is removed
            path = run_or_exit(synthesize, out, seed=seed, domains=domains, height=height, width=width, vi=vi,
                               video=video, overwrite=overwrite, progress=True)
    except Signalled:
        typer.echo("error: stopped by SIGTERM; nothing was written", err=True)
        raise typer.Exit(128 + signal.SIGTERM) from None
    typer.echo(f"wrote {path}")


@data_app.command("info")
def data_info(
    roots: list[str] = typer.Argument(..., help="Dataset roots (each optionally DIR:FORMAT), `data synth` "
                                      "directories, or folders of datasets."),
    fmt: str = typer.Option("auto", "--format", help=f"Dataset layout of the roots without :FORMAT (auto-detected by "
                            f"default): {format_help()}."),
) -> None:
    """Print, for each dataset, its format and per-split statistics (identities / images / cameras), like Table 1
    of the papers; counts that differ from FedPav's Table 1 (paper 004) are flagged.

    Example: privreid data info ~/datasets/Market-1501 ~/datasets/prid2011:prid-fedpav
    """
    from privreid.api import dataset_info
    from privreid.data import format_stats_table

    for item in run_or_exit(dataset_info, roots, fmt=fmt):
        typer.echo(f"== {item['name']} ({item['dataset'].root}) format: {item['format']}")
        typer.echo(format_stats_table(item["dataset"]))
        for line in item["notes"]:
            typer.echo(f"   {line}")


@data_app.command("formats")
def data_formats() -> None:
    """List the dataset formats (the --format values, and the FORMAT of --data DIR:FORMAT) with their layouts and
    where each comes from (built-in or a plugin).

    Example: privreid data formats
    """
    from privreid.api import dataset_formats

    for fmt in dataset_formats():
        typer.echo(f"{', '.join(fmt['spellings'])}: {fmt['layout']} [{fmt['origin']}]")
