"""``privreid methods``: the registered training methods and their options."""

from __future__ import annotations

import typer


def methods_command() -> None:
    """List the registered training methods.

    Example: privreid methods
    """
    from ..federated.method_options import option_defaults
    from ..federated.registry import available_methods, get_method, secure_aggregation_support

    for name in available_methods():
        method = get_method(name)
        typer.echo(f"{name:14s} {method.summary}")
        typer.echo(" " * 15 + f"secure aggregation: {secure_aggregation_support(method)}")
        if option_defaults(method.options):
            typer.echo(" " * 15 + "options: " + ", ".join(f"{k}={v}" for k, v in option_defaults(method.options).items()))
