"""The ``privreid`` command line (typer).

Every command prints a one-line error and exits with status 2 on bad input
(:class:`privreid.errors.PrivreidError`); nothing is written before the input
has been validated.
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperGroup

from . import __version__
from .commands.common import fail as _fail
from .errors import MissingDependencyError


class _Group(TyperGroup):
    """Every command: a missing optional package (privreid.dependencies) is one ``error:`` line and exit 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MissingDependencyError as exc:
            _fail(str(exc))


app = typer.Typer(
    cls=_Group,
    name="privreid",
    help="Privacy-preserving (federated) person re-identification: train (with DP defences), evaluate, "
         "attack, invert, corrupt, compare and sweep; Flower for multi-machine runs.\n\n"
         "Example: privreid train --method fedpav --rounds 10 --out runs/fedpav",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privreid {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """privreid command line."""


# --------------------------------------------------------------------------- one module per command
# (privreid/commands/<name>.py; one registration each, sorted; this module holds no command logic)
from .commands.attack import attack_command  # noqa: E402
from .commands.audit import audit_command  # noqa: E402
from .commands.compare import compare_command  # noqa: E402
from .commands.corrupt import corrupt_command  # noqa: E402
from .commands.data import data_app  # noqa: E402
from .commands.eval import eval_command  # noqa: E402
from .commands.export import export_command  # noqa: E402
from .commands.flower import flower_app  # noqa: E402
from .commands.invert import invert_command  # noqa: E402
from .commands.methods import methods_command  # noqa: E402
from .commands.reproduce import reproduce_command  # noqa: E402
from .commands.sweep import sweep_command  # noqa: E402
from .commands.train import train_command  # noqa: E402

app.command("train")(train_command)
app.command("eval")(eval_command)
app.command("compare")(compare_command)
app.command("methods")(methods_command)
app.add_typer(data_app, name="data")
app.command("attack")(attack_command)
app.command("audit")(audit_command)
app.command("corrupt")(corrupt_command)
app.command("export")(export_command)
app.add_typer(flower_app, name="flower")
app.command("invert")(invert_command)
app.command("reproduce")(reproduce_command)
app.command("sweep", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(sweep_command)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
