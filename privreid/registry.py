"""One small generic registry: every extension point of privreid is a :class:`Registry`.

:meth:`Registry.register` adds an entry (a taken name: one-line ConfigError; ``replace=True`` overrides);
:meth:`Registry.get` / ``registry[name]`` and :meth:`Registry.unregister` refuse an unknown name naming the
known ones; :meth:`Registry.names` / :meth:`Registry.items` list entries in registration order (built-ins
first); :meth:`Registry.origin` is ``"built-in"`` or the registering module's top-level package. A new registry
is one line, e.g. ``MALICIOUS_CLIENTS = Registry("adversary", builtins=("privreid.malicious_clients.scaled",))``;
built-ins load on first use, so a registry's module stays light.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from privreid.errors import ConfigError

T = TypeVar("T")

#: :meth:`Registry.origin` of privreid's own entries
BUILT_IN = "built-in"


class Registry(Generic[T]):
    """Named entries of one kind: ``kind`` for messages; ``builtins``: modules whose import registers them, or a
    function returning them (loaded on first use); ``key``: an entry's name (default ``.name``); ``check``:
    raises ConfigError for an entry this registry cannot take."""

    def __init__(self, kind: str, *, builtins: Sequence[str] | Callable[[], Iterable[T]] = (),
                 key: Callable[[T], str] = lambda entry: getattr(entry, "name", ""),
                 check: Callable[[T], None] | None = None):
        self.kind, self._builtins, self._key, self._check = kind, builtins, key, check
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._loading = self._loaded = False
        #: the privreid module that made this registry: its wrappers (``register_method``) are not an entry's origin
        owner = sys._getframe(1).f_globals.get("__name__", "")
        self._wrappers = owner if owner.partition(".")[0] == "privreid" else None

    # ------------------------------------------------------------------ changing it

    def register(self, entry: T, *, replace: bool = False, origin: str | None = None) -> T:
        """Add ``entry`` under its name and return it (a class decorator too); ``origin`` defaults to
        :data:`BUILT_IN` while built-ins load, else the calling module's top-level package."""
        self._load()
        if self._check is not None:
            self._check(entry)
        name = self._key(entry)
        if not name or not isinstance(name, str):
            raise ConfigError(f"a {self.kind} needs a name (got {name!r})")
        if name in self._entries and not replace:
            raise ConfigError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        self._origins[name] = origin or (BUILT_IN if self._loading else self._caller_origin())
        return entry

    def unregister(self, name: str) -> None:
        """Remove entry ``name`` (a test's, a notebook's); an unknown name is refused as :meth:`get` refuses it."""
        self.get(name)
        del self._entries[name], self._origins[name]

    @contextlib.contextmanager
    def restoring(self) -> Iterator[Registry[T]]:
        """A ``with`` block after which the registry holds what it held before (tests, notebooks)."""
        self._load()
        entries, origins = dict(self._entries), dict(self._origins)
        try:
            yield self
        finally:
            self._entries, self._origins = entries, origins

    # ------------------------------------------------------------------ reading it

    def get(self, name: str) -> T:
        """The entry ``name``; :meth:`unknown` as the error for a name that is not registered."""
        self._load()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.unknown(name) from None

    def unknown(self, name: object, choices: Iterable[str] | None = None) -> ConfigError:
        """The one-line error for an unknown ``name``, listing ``choices`` (default: :meth:`names`)."""
        known = list(self.names() if choices is None else choices)
        return ConfigError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(known) or 'none registered'}")

    def names(self) -> list[str]:
        """Every registered name, in registration order (built-ins first)."""
        self._load()
        return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs in registration order."""
        self._load()
        return list(self._entries.items())

    def values(self) -> list[T]:
        self._load()
        return list(self._entries.values())

    def origin(self, name: str) -> str:
        """Where entry ``name`` came from: :data:`BUILT_IN`, or the top-level package that registered it."""
        self.get(name)
        return self._origins[name]

    def keys(self) -> list[str]:
        return self.names()

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"

    # ------------------------------------------------------------------ internals

    def _load(self) -> None:
        """Register the built-ins once (re-entrant: their modules call :meth:`register` while loading)."""
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            if callable(self._builtins):
                for entry in self._builtins():
                    self.register(entry)
            else:
                for module in self._builtins:
                    importlib.import_module(module)
            self._loaded = True
        finally:
            self._loading = False

    def _caller_origin(self) -> str:
        """The top-level package of the first calling module that is neither this one nor the privreid module
        that made the registry (whose ``register_*`` functions wrap :meth:`register`)."""
        frame = sys._getframe(1)
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module not in (__name__, self._wrappers):
                top = module.partition(".")[0]
                return BUILT_IN if top == "privreid" else top
            frame = frame.f_back
        return BUILT_IN
