"""User-facing errors.

Anything raised as a :class:`PrivreidError` is a problem with the user's input
(a missing dataset, a bad flag, an unreadable checkpoint).  The CLI prints its
message on one line and exits with status 2; library users can catch it.

The messages name command-line flags.  A Python function whose keywords are
those flags (``train_run(..., overwrite=True)`` for ``--overwrite``) runs its
body under :func:`python_keywords`, which, outside the command line
(:func:`command_line`), rewrites the flags of an error it raises into its
keywords.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterator
from contextlib import contextmanager

#: set while privreid's command line runs a command (:func:`command_line`)
_COMMAND_LINE = contextvars.ContextVar("privreid_command_line", default=False)


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


@contextmanager
def command_line() -> Iterator[None]:
    """The block runs a command of privreid's command line: errors keep naming flags."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


@contextmanager
def python_keywords(rewrites: list[tuple[str, str]]) -> Iterator[None]:
    """Outside the command line, a :class:`PrivreidError` raised in the block is raised again (same class) with
    each ``(regex, replacement)`` of ``rewrites`` applied to its message, e.g. ``("--overwrite",
    "overwrite=True")``: a Python caller is told the keyword to pass, not a flag."""
    try:
        yield
    except PrivreidError as exc:
        message = str(exc)
        for pattern, replacement in rewrites:
            message = re.sub(pattern, replacement, message)
        if _COMMAND_LINE.get() or message == str(exc):
            raise
        try:
            rewritten = type(exc)(message)
        except TypeError:  # an error class with another signature keeps its message
            raise exc from None
        raise rewritten from exc
