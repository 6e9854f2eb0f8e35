"""The ``privreid`` command line (typer).

Every command prints a one-line error and exits with status 2 on bad input
(:class:`privreid.errors.PrivreidError`, and click's parse errors, which the
group turns into one line instead of a usage box); nothing is written before
the input has been validated.
"""

from __future__ import annotations

import signal
import sys

import click
import typer
from typer.core import TyperGroup

from privreid import __version__
from privreid.commands.common import fail as _fail
from privreid.commands.common import refuse_empty_paths, usage_error_line
from privreid.environment import check_environment
from privreid.errors import PrivreidError
from privreid.log import configure_console


#: ``ctx.meta`` key: the command line asks for a subcommand's --help (plugins are then not loaded unless named)
_ASKS_HELP = "privreid.asks_help"


class _Group(TyperGroup):
    """Every command and subcommand, one contract: a parse error (unknown option, a value of the wrong type, a
    missing argument), an empty path and any user-input error a command did not catch itself (a missing
    optional package, privreid.dependencies; an environment variable read at import, privreid.environment) are
    each one ``error:`` line and exit 2.  ``privreid`` alone still prints the help."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        refuse_empty_paths(self)

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.ClickException as exc:
            usage_error_line(exc)

    def parse_args(self, ctx, args):
        ctx.meta[_ASKS_HELP] = any(arg in ctx.help_option_names for arg in args)  # read by the root callback
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        from privreid.signals import Signalled, raising_signals

        try:
            check_environment()
            configure_console()
            # a signal no command handles itself (start-up: data being read, a model being built) is one line too
            with raising_signals(signal.SIGTERM):
                return super().invoke(ctx)
        except (Signalled, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, Signalled) else signal.SIGINT
            _fail(f"stopped by {signal.Signals(signum).name} while running {ctx.command_path} "
                  f"{ctx.invoked_subcommand or ''}".rstrip() + " (no file is left half-written)", 128 + signum)
        except PrivreidError as exc:  # one a command did not catch: a missing optional package, an environment variable
            _fail(str(exc))
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.ClickException as exc:
            usage_error_line(exc, ctx)


app = typer.Typer(
    cls=_Group,
    name="privreid",
    help="Privacy-preserving (federated) person re-identification: train (with DP defenses), evaluate, "
         "attack, invert, corrupt, compare and sweep; Flower for multi-machine runs.\n\n"
         "Example: privreid train --method fedpav --rounds 10 --out runs/fedpav",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privreid {__version__}")
        raise typer.Exit()


@app.callback()
def main(ctx: typer.Context,
         version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
         plugin: list[str] = typer.Option([], "--plugin", metavar="MODULE", help="Load a plugin that is not "
                                          "installed: module.path or module.path:function (repeatable; also "
                                          "$PRIVREID_PLUGINS, comma-separated). Installed plugins (entry points "
                                          "'privreid.plugins') load without it. See docs/extending.md.")) -> None:
    """privreid command line."""
    if plugin or not ctx.meta.get(_ASKS_HELP):  # a command runs: its methods, formats... may come from plugins
        from privreid.plugins import load_plugins

        load_plugins(plugin, export=True)


# --------------------------------------------------------------------------- one module per command
# (privreid/commands/<name>.py; one registration each, sorted; this module holds no command logic)
from privreid.commands.attack import attack_command  # noqa: E402
from privreid.commands.audit import audit_command  # noqa: E402
from privreid.commands.compare import compare_command  # noqa: E402
from privreid.commands.corrupt import corrupt_command  # noqa: E402
from privreid.commands.data import data_app  # noqa: E402
from privreid.commands.eval import eval_command  # noqa: E402
from privreid.commands.export import export_command  # noqa: E402
from privreid.commands.flower import flower_app  # noqa: E402
from privreid.commands.invert import invert_command  # noqa: E402
from privreid.commands.methods import methods_command  # noqa: E402
from privreid.commands.reproduce import reproduce_command  # noqa: E402
from privreid.commands.status import status_command  # noqa: E402
from privreid.commands.sweep import sweep_command  # noqa: E402
from privreid.commands.train import train_command  # noqa: E402

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
app.command("status")(status_command)
app.command("sweep", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(sweep_command)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
