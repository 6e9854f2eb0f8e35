"""The environment variables privreid reads, each parsed in one place.

``PRIVREID_CACHE``          the cache root (synthetic data, Flower site state); ``~/.cache/privreid`` when unset;
``PRIVREID_DECODED_MB``     the decoded-image cache's budget (:mod:`privreid.data.torch_dataset`);
``PRIVREID_HEAP_SLACK_MB``  the heap trimmer's slack (:mod:`privreid.federated.heap`).

A value that does not parse is one :class:`~privreid.errors.ConfigError` line naming the variable, raised before any
work is done."""

from __future__ import annotations

import math
import os
from pathlib import Path

from privreid.errors import ConfigError

CACHE_ENV = "PRIVREID_CACHE"


def cache_root() -> Path:
    """``$PRIVREID_CACHE`` (``~`` expanded), or ``~/.cache/privreid`` when unset or empty."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "privreid"


def mib_from_env(name: str, default: float, *, off: bool = False) -> float | None:
    """The MiB in environment variable ``name``: ``default`` when unset or blank; ``off=True``: ``off`` gives
    ``None``; anything else but a finite number >= 0 is a ConfigError."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return float(default)
    if off and raw.lower() == "off":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan  # reported below, as a negative or infinite number is
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be a number of MiB >= 0{' or ' + repr('off') if off else ''}, got {raw!r}")
    return value


#: the MiB-valued variables, each with whether it takes ``off``
MIB_VARIABLES = {"PRIVREID_DECODED_MB": False, "PRIVREID_HEAP_SLACK_MB": True}


def check_environment() -> None:
    """Parse every variable privreid reads now, so a bad value is one ConfigError before a command does any work."""
    for name, off in MIB_VARIABLES.items():
        mib_from_env(name, 0, off=off)
