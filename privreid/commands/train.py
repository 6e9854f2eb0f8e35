"""``privreid train``: one run (federated, centralised or standalone) from its options or a YAML preset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .common import params_with_preset, run_or_exit
from .options import CONFIG_OPTIONS, config_options, run_config

#: the run-configuration options of ``privreid train``: every one of :data:`~.options.CONFIG_OPTIONS`
TRAIN_OPTIONS = tuple(CONFIG_OPTIONS)


def train_config(p: dict):
    """The :class:`~privreid.config.RunConfig` of ``privreid train``'s parameters (after the preset is applied)."""
    return run_config(p, TRAIN_OPTIONS)


@config_options(TRAIN_OPTIONS)
def train_command(
    ctx: typer.Context,
    config_file: Optional[Path] = typer.Option(None, "--config", help="YAML preset of train options (keys are "
                                               "the option names, e.g. `rounds: 300`); flags given on the "
                                               "command line override it. See configs/."),
    out: Path = typer.Option(Path("runs/latest"), help="Output directory (ckpt.pt, metrics.jsonl, summary.json)."),
    overwrite: bool = typer.Option(False, help="Replace a run already in --out."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its checkpoint."),
    quiet: bool = typer.Option(False, help="No progress bars."),
    logger: str = typer.Option("none", help="Also mirror every metric record to tensorboard (OUT/tensorboard; "
                               "pip install 'privreid[tensorboard]') or wandb ('privreid[wandb]'); none."),
    **options,
) -> None:
    """Train a model (federated, centralised or standalone).

    Example: privreid train --method centralized --rounds 5 --out runs/central
    """
    from ..provenance import train_preset
    from ..training import train_run

    def go() -> dict:
        p = params_with_preset(ctx, config_file)
        return train_run(train_config(p), p["out"], overwrite=p["overwrite"], resume=p["resume"],
                         progress=not p["quiet"], echo=typer.echo, preset=train_preset(p), logger=p["logger"])

    summary = run_or_exit(go)
    typer.echo(json.dumps(_brief(summary), indent=2))


def _brief(summary: dict) -> dict:
    """``summary.json`` without its per-test-set tables (also inside the ``best`` block), for the terminal."""
    def drop(d: dict) -> dict:
        return {k: drop(v) if isinstance(v, dict) else v for k, v in d.items() if not k.endswith("per_testset")}

    return drop(summary)
