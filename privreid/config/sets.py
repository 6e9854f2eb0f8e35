"""``--set SECTION.FIELD=VALUE``: any field of a :class:`~privreid.config.RunConfig`, parsed by the field's type."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable

from privreid.config import SECTIONS, RunConfig, field_types
from privreid.config.values import parse_json, parse_value
from privreid.errors import ConfigError


def apply_sets(config: RunConfig, pairs: Iterable[str]) -> RunConfig:
    """``config`` with each ``SECTION.FIELD=VALUE`` applied in order (``--set``; a new object, validated later).

    The value is parsed by the field's type (:func:`parse_value`).  A mapping field takes a path into it:
    ``federation.method_options.mu=0.1`` sets one key (nested mappings created as needed; the value is JSON where it
    parses, as ``--opt``); ``federation.method_options={"mu": 0.1}`` replaces the whole mapping.  A bad path or value
    raises a one-line :class:`ConfigError` naming what is valid."""
    out = RunConfig.from_dict(config.to_dict())
    for pair in pairs:
        key, sep, raw = str(pair).partition("=")
        section, *path = key.strip().split(".")
        if not sep or not path:
            raise ConfigError(f"--set expects SECTION.FIELD=VALUE, e.g. optim.lr_step=20 (got {pair!r})")
        if section not in SECTIONS:
            raise ConfigError(f"--set {key}: no section {section!r} (sections: {', '.join(SECTIONS)})")
        types_ = field_types(section)
        name, keys = path[0], path[1:]
        if name not in types_:
            raise ConfigError(f"--set {key}: {section} has no field {name!r} (its fields: {', '.join(types_)})")
        tp = types_[name]
        if keys and not (typing.get_origin(tp) is dict or tp is dict):
            raise ConfigError(f"--set {key}: {section}.{name} is not a mapping")
        obj = getattr(out, section)
        try:
            if keys:
                value = json.loads(json.dumps(getattr(obj, name) or {}))  # a deep copy of plain data
                node = value
                for k in keys[:-1]:
                    node = node.setdefault(k, {})
                    if not isinstance(node, dict):
                        raise ValueError("a path into mappings")
                node[keys[-1]] = parse_json(raw)
            else:
                value = parse_value(raw, tp)
        except ValueError as exc:
            raise ConfigError(f"--set {key}: expected {exc}, got {raw!r}") from None
        setattr(obj, name, value)
    return out
