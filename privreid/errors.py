"""User-facing errors.

A :class:`PrivreidError` is a problem with the user's input (a missing dataset, a bad flag, an unreadable
checkpoint): the CLI prints its message on one line and exits with status 2.  The messages name command-line flags;
outside the command line, :func:`python_errors` names the keywords instead (``overwrite=True`` for ``--overwrite``)."""

from __future__ import annotations

import functools
import inspect
import re


class PrivreidError(Exception):
    """Base class for errors caused by user input rather than by a bug."""


class DataError(PrivreidError):
    """A dataset is missing, empty, corrupt or in an unknown layout."""


class ConfigError(PrivreidError):
    """A configuration value (CLI flag or API argument) is invalid."""


class CheckpointError(PrivreidError):
    """A checkpoint is unreadable, unsafe or incompatible."""


class NotACheckpointError(CheckpointError):
    """A file that is not a privreid checkpoint at all (another kind of model file, or no model file)."""


class MissingDependencyError(PrivreidError):
    """A third-party package that a command needs is not installed (or fails to import); says what to install."""


def python_errors(rewrites: list[tuple[str, str]] = ()):
    """Decorate a Python function whose keywords are a command's flags.

    Outside the command line (no click context is active: :func:`_on_command_line`), a
    :class:`PrivreidError` it raises is raised again (same class) with each flag that is one of its keywords
    named as the keyword (``--overwrite`` -> ``overwrite=True`` for a flag that is off by default,
    ``--seq-len`` -> ``seq_len``), after the ``(regex, replacement)`` pairs of ``rewrites`` (whole command
    lines, say)."""

    def decorate(function):
        params = inspect.signature(function).parameters
        flags = [(rf"(?<![\w-])--{name.replace('_', '-')}(?![\w-])",
                  f"{name}=True" if param.default is False else name) for name, param in params.items()
                 if param.kind is inspect.Parameter.KEYWORD_ONLY]
        every = [*rewrites, *flags]

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except PrivreidError as exc:
                message = str(exc)
                for pattern, replacement in every:
                    message = re.sub(pattern, replacement, message)
                if message == str(exc) or _on_command_line():
                    raise
                try:
                    rewritten = type(exc)(message)
                except TypeError:  # an error class with another signature keeps its message
                    raise exc from None
                raise rewritten from exc

        return wrapper

    return decorate


def _on_command_line() -> bool:
    """Whether a command of privreid's command line is running (click's context stack is not empty)."""
    import click

    return click.get_current_context(silent=True) is not None
