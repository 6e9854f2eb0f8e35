"""Sub-commands of the ``privreid`` CLI that live outside :mod:`privreid.cli`.

Each module defines one typer-annotated command function; :mod:`privreid.cli`
registers it.  Shared helpers (one-line errors, comma lists) are in
:mod:`privreid.commands.common`.
"""
