"""Method options (``--opt key=value``): one small frozen dataclass per method, parsed by one function.

A method declares its options as a frozen dataclass (fields with defaults and a ``#:`` comment each, e.g.
:class:`~privreid.federated.methods.dppt.DPPTSettings`) and passes the class as ``Method(options=...)``.
:func:`parse_options` turns ``FederationConfig.method_options`` (values from ``--opt``, ``--set
federation.method_options.KEY=VALUE`` or a preset's ``opt:`` mapping: JSON scalars or strings) into an instance: an unknown
key is an error naming the method's options; each value is coerced to its field's type by
:func:`privreid.config.values.parse_value`, booleans by :func:`privreid.config.values.parse_bool` (true/false, yes/no,
1/0), and a number must be finite (a NaN FedProx mu would only diverge rounds later).  Ranges stay with the method
that uses the value.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privreid.config.values import parse_value
from privreid.errors import ConfigError


@dataclass(frozen=True)
class NoOptions:
    """The options of a method that has none."""


def option_defaults(options: type) -> dict[str, Any]:
    """Option name -> default of an options dataclass (what ``privreid methods`` lists)."""
    return {f.name: f.default for f in dataclasses.fields(options)}


def run_options(options: type, config) -> Any:
    """The run's values of the fields of ``options`` (a method's options dataclass, or a part of it that a method's
    own code reads): ``--opt`` typed, else the defaults; other keys are left to ``Method.check_options``."""
    known = option_defaults(options)
    given = {k: v for k, v in config.federation.method_options.items() if k in known}
    return parse_options(options, given, config.federation.method)


def parse_options(options: type, values: Mapping[str, Any], method: str) -> Any:
    """``values`` as an instance of the options dataclass ``options`` of method ``method``.

    Raises :class:`ConfigError` (one line) for an unknown key, naming the
    method's options, or a value its field's type does not take.
    """
    known = option_defaults(options)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"method {method!r} has no option {', '.join(unknown)} "
                          f"(its options: {', '.join(sorted(known)) or 'none'})")
    types_ = typing.get_type_hints(options)
    parsed = {}
    for key, value in values.items():
        try:
            parsed[key] = parse_value(value, types_[key])
        except ValueError as exc:
            raise ConfigError(f"{method} option {key} must be {exc}, got {value!r}") from None
        if isinstance(parsed[key], float) and not math.isfinite(parsed[key]):
            raise ConfigError(f"{method} option {key} must be a finite number, got {value!r}")
    return options(**parsed)
