"""Helpers shared by every CLI command: one-line errors with exit status 2."""

from __future__ import annotations

from typing import Optional

import typer

from ..errors import PrivreidError


def fail(msg: str) -> None:
    """Print ``error: msg`` to stderr and exit with status 2."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def csv_list(value: Optional[str]) -> Optional[list[str]]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None``/empty -> ``None``."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def run_or_exit(fn, *args, **kwargs):
    """Call ``fn`` turning user-input errors (:class:`PrivreidError`) into a one-line message + exit 2."""
    try:
        return fn(*args, **kwargs)
    except PrivreidError as exc:
        fail(str(exc))
