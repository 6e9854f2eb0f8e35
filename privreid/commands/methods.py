"""``privreid methods``: the registered training methods, their options and the method x defence support matrix."""

from __future__ import annotations

import typer


def methods_command() -> None:
    """List the registered training methods, where each comes from (built-in or a plugin), and which defences
    each can run under.

    Example: privreid methods
    """
    from ..defenses.registry import defenses
    from ..federated.method_options import option_defaults
    from ..federated.registry import METHODS, available_methods, get_method
    from ..plugins import listed_origin

    for name in available_methods():
        method = get_method(name)
        typer.echo(f"{name:14s} {method.summary} [{listed_origin(METHODS.origin(name))}]")
        for defense in defenses():
            typer.echo(" " * 15 + f"{defense.name}: {defense.supports(method)}")
        defaults = option_defaults(method.options)
        if defaults:
            typer.echo(" " * 15 + "options: " + ", ".join(f"{k}={v}" for k, v in defaults.items()))
