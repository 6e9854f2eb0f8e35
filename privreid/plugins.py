"""Plugins: code that registers methods, dataset formats, defenses or attacks in every privreid process.

A registration lives only in the process that ran it; plugins reach the command line and the Flower apps:
installed ones (entry points of :data:`GROUP` in a package's ``pyproject.toml``), and named ones (``privreid
--plugin``, repeatable, or :data:`PLUGINS_ENV`, comma-separated; looked for on ``sys.path``, then the current
directory). A value is a module (imported) or ``module:function`` (then called). The CLI exports them in
:data:`PLUGINS_ENV` for the processes it starts (SuperLink, SuperNodes, ``--parallel-clients`` workers). Each
loads once per process; a failure is one :class:`PluginError` line. :func:`listed_origin` names an entry's origin.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from privreid.errors import ConfigError

#: the entry-point group of installed plugins
GROUP = "privreid.plugins"

#: the environment variable naming plugins (comma-separated module paths), read by every process
PLUGINS_ENV = "PRIVREID_PLUGINS"

#: ``module.path`` or ``module.path:function`` (what an entry point's value may be)
_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)?")

#: the plugins this process has loaded (entry point values and named specs)
_loaded: set[str] = set()

#: top-level package of an installed plugin -> the distribution that declared it
_distributions: dict[str, str] = {}


class PluginError(ConfigError):
    """A plugin that cannot be loaded: not a module path, an import that fails, a registration refused."""


def named_plugins(text: str | None = None) -> list[str]:
    """The plugins named in ``text`` (default: :data:`PLUGINS_ENV`), comma-separated, blanks dropped."""
    text = os.environ.get(PLUGINS_ENV, "") if text is None else text
    return [spec.strip() for spec in text.split(",") if spec.strip()]


def load_plugins(named: Iterable[str] = (), *, export: bool = False) -> None:
    """Load every installed plugin, then the ``named`` ones and those in :data:`PLUGINS_ENV`; ``export`` (the
    command line) writes them all to :data:`PLUGINS_ENV`. Raises :class:`PluginError`."""
    specs = list(dict.fromkeys([*named_plugins(), *(spec.strip() for spec in named)]))
    for spec in specs:
        if not _SPEC.fullmatch(spec):
            raise PluginError(f"plugin {spec!r} is not a module path (module.path or module.path:function)")
    for entry in entry_points(group=GROUP):
        dist = entry.dist.name if entry.dist is not None else None
        if dist:
            _distributions.setdefault(entry.module.partition(".")[0], dist)
        _load(entry, f"plugin {entry.name!r} ({entry.value}" + (f", from {dist})" if dist else ")"))
    if specs and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # after everything installed: a file here never shadows a package
    for spec in specs:
        _load(EntryPoint(spec, spec, GROUP), f"plugin {spec!r}")
    if export and specs:
        os.environ[PLUGINS_ENV] = ",".join(specs)


def _load(entry: EntryPoint, label: str) -> None:
    """Import ``entry`` (and call it if it names a function), once; any failure as one PluginError line."""
    if entry.value in _loaded:
        return
    try:
        loaded = entry.load()
        if entry.attr:
            loaded()
    except Exception as exc:  # noqa: BLE001 - any exception in foreign code is the plugin's failure, in one line
        message = " ".join(str(exc).split())
        raise PluginError(f"{label} failed to load: {type(exc).__name__}" + (f": {message}" if message else "")) \
            from None
    _loaded.add(entry.value)


def listed_origin(origin: str) -> str:
    """A registry entry's origin (:meth:`privreid.registry.Registry.origin`: ``built-in``, or the top-level package
    that registered it) as listings show it: the distribution of an installed plugin, else unchanged."""
    return _distributions.get(origin, origin)
