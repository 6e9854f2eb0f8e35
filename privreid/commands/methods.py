"""``privreid methods``: the registered training methods and their options."""

from __future__ import annotations

import typer


def methods_command() -> None:
    """List the registered training methods.

    Example: privreid methods
    """
    from ..federated.registry import available_methods, get_method

    for name in available_methods():
        method = get_method(name)
        typer.echo(f"{name:14s} {method.summary}")
        if method.options:
            typer.echo(" " * 15 + "options: " + ", ".join(f"{k}={v}" for k, v in method.options.items()))
