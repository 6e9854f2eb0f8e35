"""Method registry.

A method = parameter policy + client update + server strategy (DESIGN.md).
Each method module builds a :class:`Method` and calls :func:`register`; the
engine looks methods up by name and never imports a method module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..config import RunConfig
from ..data.types import ClientData
from ..errors import ConfigError
from .policy import ParameterPolicy
from .strategy import Strategy


@dataclass(frozen=True)
class Method:
    """Everything the engine needs to know about a training method.

    Attributes:
        name: registry key (``--method NAME``).
        summary: one line for ``--help`` and reports.
        policy: which state keys are shared / local.
        make_client_update: ``config -> callable(ClientContext) -> metrics``.
        make_strategy: ``config -> Strategy``.
        has_global_model: whether the run produces a global model (standalone
            training does not; its clients' models are evaluated instead).
        communicates: whether rounds involve client-server transfers (False
            for centralised training, whose "client" is the data centre).
        prepare_clients: optional rewrite of the client list before training
            (centralised training pools all clients into one).
    """

    name: str
    summary: str
    policy: ParameterPolicy
    make_client_update: Callable[[RunConfig], Callable]
    make_strategy: Callable[[RunConfig], Strategy]
    has_global_model: bool = True
    communicates: bool = True
    prepare_clients: Callable[[list[ClientData]], list[ClientData]] | None = None


_REGISTRY: dict[str, Method] = {}

#: Modules whose import registers the built-in methods.
BUILTIN_METHOD_MODULES = ("privreid.federated.methods", "privreid.centralized")


def register(method: Method) -> Method:
    if method.name in _REGISTRY:
        raise ValueError(f"method {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def _load_builtins() -> None:
    for module in BUILTIN_METHOD_MODULES:
        importlib.import_module(module)


def available_methods() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get_method(name: str) -> Method:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(sorted(_REGISTRY))}") from None
