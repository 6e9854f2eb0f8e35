"""``privreid status OUT``: where a sweep or a table stands, read from its run directories (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import typer

from privreid.commands.common import run_or_exit


def status_command(
    out: Path = typer.Argument(..., help="The --out of `privreid sweep` or `privreid reproduce`."),
) -> None:
    """Print every run of a sweep or table: done / running / queued / failed, its round, its seen mAP and an ETA
    from the finished rounds; then the counts and the sweep's ETA.

    Example: privreid status runs/sweep
    """
    from privreid.experiments import status

    def go():
        plan = status.read_plan(out)
        return status.render(status.collect(out), plan.get("max_concurrent", 1))

    typer.echo(run_or_exit(go))
