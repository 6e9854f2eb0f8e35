"""User-facing errors.

Anything raised as a :class:`PrivreidError` is a problem with the user's input
(a missing dataset, a bad flag, an unreadable checkpoint).  The CLI prints its
message on one line and exits with status 2; library users can catch it.
"""


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
