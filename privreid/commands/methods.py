"""``privreid methods``: the registered training methods, their options and the method x defense support matrix."""

from __future__ import annotations

import typer

from privreid.model_names import TORCHREID_ARCHS
from privreid.commands.common import ARCHS


def methods_command() -> None:
    """List the registered training methods, where each comes from (built-in or a plugin), and which defenses
    each can run under; then the architectures --arch names for a model file from elsewhere.

    Example: privreid methods
    """
    from privreid.defenses.registry import defenses
    from privreid.federated.method_options import option_defaults
    from privreid.federated.registry import METHODS
    from privreid.plugins import listed_origin

    for name, method in sorted(METHODS.items(), key=lambda item: item[0]):
        typer.echo(f"{name:14s} {method.summary} [{listed_origin(METHODS.origin(name))}]")
        for defense in defenses():
            typer.echo(" " * 15 + f"{defense.name}: {defense.supports(method)}")
        defaults = option_defaults(method.options)
        if defaults:
            typer.echo(" " * 15 + "options: " + ", ".join(f"{k}={v}" for k, v in defaults.items()))
    typer.echo("")
    typer.echo(f"model files from elsewhere (--arch of eval, attack, compare, audit, invert): {', '.join(ARCHS)} "
               "(read by privreid; torchreid and fast-reid ResNets)")
    typer.echo(f"torchreid's models, built by torchreid itself (privreid[torchreid]): {', '.join(TORCHREID_ARCHS)}")
