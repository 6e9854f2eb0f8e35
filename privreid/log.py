"""Messages and progress bars: privreid speaks through Python's :mod:`logging` and draws bars only on a terminal.

* Every message goes to the logger ``privreid`` or one of its children (``logging.getLogger(__name__)``).  The library
  adds no handler but a :class:`logging.NullHandler` (in :mod:`privreid`'s ``__init__``), so a program that calls
  privreid prints nothing until it configures logging; it silences privreid with
  ``logging.getLogger("privreid").setLevel(logging.ERROR)`` or redirects it with a handler of its own.
* The command line configures the console (:func:`configure_console`): information as the bare message on stdout,
  warnings (Python's included, :func:`show_warning`) as ``warning: ...`` on stderr.
* A run directory's ``log.txt`` receives every record, and every Python warning, as one line with its time and level
  (``2026-11-27 01:02:03 INFO message``, :func:`file_handler`), whether or not a console is configured
  (:func:`privreid.provenance.run_log`).
* :func:`progress_bar` is a tqdm bar that draws only when stderr is a terminal, and past ``log.txt``'s mirror of what
  is printed, so a log never holds a bar frame or an escape code.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any, TextIO

#: the root of privreid's loggers
LOGGER_NAME = "privreid"
#: the logger the command line shows Python's warnings through (the name :func:`logging.captureWarnings` uses)
WARNINGS_LOGGER_NAME = "py.warnings"
#: the time stamp of a line of ``log.txt`` (``2026-11-27 01:02:03 INFO round 2 global seen ...``)
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

def terminal(stream: TextIO) -> TextIO:
    """The stream under ``log.txt``'s mirror of ``stream`` (:class:`privreid.provenance._Tee`), or ``stream``:
    what is written there reaches the terminal but not ``log.txt`` (log records reach it through their own handler)."""
    return getattr(stream, "terminal", stream)


class _ConsoleHandler(logging.Handler):
    """The command line's console: information as the bare message on stdout, warnings and errors as
    ``warning: message`` / ``error: message`` on stderr (the streams of the moment, so a test runner's capture works)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            if record.levelno >= logging.WARNING:
                stream, message = terminal(sys.stderr), f"{record.levelname.lower()}: {message}"
            else:
                stream = terminal(sys.stdout)
            stream.write(message + "\n")
            stream.flush()
        except BrokenPipeError:  # stdout's reader left (`| head`): the command stops quietly (commands.common)
            raise
        except Exception:
            self.handleError(record)


def configure_console() -> None:
    """Show privreid's messages (and Python's warnings, one line each) on the console: what the command line does.

    Called again (one process, several commands: a test runner), it replaces its earlier handler.
    """
    handler = _ConsoleHandler()
    for name in (LOGGER_NAME, WARNINGS_LOGGER_NAME):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _ConsoleHandler)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    warnings.showwarning = show_warning


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
    """A Python warning as one log record (``UserWarning: message``) of :data:`WARNINGS_LOGGER_NAME`:
    the command line's :data:`warnings.showwarning`."""
    logging.getLogger(WARNINGS_LOGGER_NAME).warning("%s: %s", category.__name__, message)


class _LineFormatter(logging.Formatter):
    """``2026-11-27 01:02:03 INFO message``; each line of a message of several lines (a traceback) stamped alike."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = f"{self.formatTime(record, DATE_FORMAT)} {record.levelname}"
        lines = [line.rstrip() for line in super().format(record).splitlines() if line.strip()]
        return "\n".join(f"{stamp} {line}" for line in lines) if lines else stamp


def file_handler(path) -> logging.FileHandler:
    """A handler appending every record to ``path`` as stamped lines (the run's ``log.txt``, :class:`_LineFormatter`)."""
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(_LineFormatter())
    handler.setLevel(logging.INFO)
    return handler


def progress_bar(iterable=None, *, enabled: bool = True, **kwargs):
    """A tqdm bar (tqdm's arguments) that draws only if ``enabled`` and stderr is a terminal, on the terminal
    itself (:func:`terminal`): never into ``log.txt``, a pipe or a file."""
    from tqdm.auto import tqdm

    stream = terminal(sys.stderr)
    drawn = enabled and stream.isatty()
    return tqdm(iterable, file=stream, disable=not drawn, dynamic_ncols=True, **kwargs)
