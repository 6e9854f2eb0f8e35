"""Plugins: code that registers methods, dataset formats, defences or attacks in every privreid process.

A registration (``register(Method(...))``, ``register_format(...)``) lives
only in the process that ran it.  Plugins make it reach the ``privreid``
command line and the Flower apps, which run in processes of their own:

* **installed plugins**: every entry point of the group :data:`GROUP`
  (``[project.entry-points."privreid.plugins"]`` in a package's
  ``pyproject.toml``).  Its value is a module (imported: its registrations
  run) or ``module:function`` (imported, then called with no argument);
* **named plugins**: the same two spellings given to ``privreid --plugin``
  (repeatable) or in :data:`PLUGINS_ENV` (comma-separated), for code that is
  not installed, looked for on ``sys.path`` and then in the current
  directory.  The CLI exports them in :data:`PLUGINS_ENV`, so the processes
  it starts (Flower's SuperLink, SuperNodes and their apps, the
  ``--parallel-clients`` workers) load them too.

Each plugin is loaded once per process.  A plugin that fails to import or
to register (a taken name) is one :class:`PluginError` line naming it and
the exception.  :func:`origin_of` says where a registered entry came from,
for ``privreid methods`` and ``privreid data formats``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import sys
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from .errors import ConfigError

#: the entry-point group of installed plugins
GROUP = "privreid.plugins"

#: the environment variable naming plugins (comma-separated module paths), read by every process
PLUGINS_ENV = "PRIVREID_PLUGINS"

#: the origin of privreid's own entries
BUILT_IN = "built-in"

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
    """Load every installed plugin (:data:`GROUP`), then the ``named`` ones and those in :data:`PLUGINS_ENV`.

    Named plugins are looked for on ``sys.path``, then in the current
    directory.  ``export=True`` (the command line) writes them all to
    :data:`PLUGINS_ENV`, so the processes this one starts load them.
    Raises :class:`PluginError`.
    """
    specs = list(dict.fromkeys([*named_plugins(), *(spec.strip() for spec in named)]))
    for spec in specs:
        if not _SPEC.fullmatch(spec):
            raise PluginError(f"plugin {spec!r} is not a module path (module.path or module.path:function)")
    for entry in entry_points(group=GROUP):
        dist = entry.dist.name if entry.dist is not None else None
        if dist:
            _distributions.setdefault(_top(entry.module), dist)
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


def _top(module: str) -> str:
    return module.partition(".")[0]


def package_origin(module: str) -> str:
    """Where code in ``module`` comes from: :data:`BUILT_IN` for privreid's own, else the distribution of the
    installed plugin whose package it is, else its top-level package (a named plugin, a user's script)."""
    top = _top(module)
    return BUILT_IN if top == "privreid" else _distributions.get(top, top)


def _defined_in(obj: object) -> str | None:
    """The module a function, method or class (or the function of a ``functools.partial``) was defined in."""
    obj = obj.func if isinstance(obj, functools.partial) else obj
    if inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj):
        return obj.__module__
    return None


def origin_of(obj: object) -> str:
    """Where a registered entry comes from (:func:`package_origin`): a function's or class's own module; for an
    instance, its class's module, or, when that is privreid's (a ``Method``, a ``DatasetFormat``), the module of
    the first of its fields defined outside privreid and the standard library."""
    if _defined_in(obj) is not None:
        candidates = [obj]
    elif dataclasses.is_dataclass(obj):
        candidates = [type(obj), *(getattr(obj, f.name) for f in dataclasses.fields(obj))]
    else:
        candidates = [type(obj), *getattr(obj, "__dict__", {}).values()]
    for candidate in candidates:
        module = _defined_in(candidate)
        if module and _top(module) != "privreid" and _top(module) not in sys.stdlib_module_names:
            return package_origin(module)
    return BUILT_IN
