"""String parsing of configuration values: the one boolean rule, JSON where it parses, and a field's type.

Used by ``--set`` (:mod:`privreid.config.sets`), presets, method options
(:func:`privreid.federated.method_options.parse_options`) and :meth:`privreid.config.RunConfig.from_dict`."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

#: the words of the one boolean rule (--set, method options, presets' method options)
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes"), ("false", "0", "no")


def parse_bool(value: Any) -> bool:
    """The one boolean rule: ``True``/``False``, ``1``/``0`` and the words true/false, 1/0, yes/no (any case);
    :class:`ValueError` for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    raise ValueError("true or false (also yes/no, 1/0)")


def parse_json(raw: str) -> Any:
    """``raw`` as JSON where it parses (``0.01``, ``true``, ``[1, 2]``, ``null``), else the string itself."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def expected(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(expected(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is list and typing.get_args(tp) in ((str,), (int,)):
        return f"a list of {expected(typing.get_args(tp)[0])[3 if tp == list[int] else 2:]}s"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null",
            list: "a list", dict: "a mapping"}.get(typing.get_origin(tp) or tp, str(tp))


def parse_value(value: Any, tp: Any) -> Any:
    """``value`` (a string as typed, or a YAML/JSON scalar) as type ``tp``; :class:`ValueError` says what it needs.

    ``tp``: ``bool`` (:func:`parse_bool`), ``int``, ``float``, ``str``, ``X | None`` (``none``/``null`` is
    ``None``), ``list[str]`` (a JSON list or comma-separated), ``dict`` (a JSON object) and ``Any`` (JSON where it
    parses, else the string)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return parse_value(value, inner)
    if tp is Any:
        return parse_json(value) if isinstance(value, str) else value
    if tp is bool:
        return parse_bool(value)
    if tp is int:
        if isinstance(value, str):
            value = parse_json(value.strip())
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ValueError("an integer")
    if tp is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ValueError("a number") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ValueError("a number")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ValueError("a string")
    if origin is list:
        if isinstance(value, str):
            value = parse_json(value) if value.strip().startswith("[") else [v.strip() for v in value.split(",")
                                                                             if v.strip()]
        if isinstance(value, list):
            return [parse_value(v, args[0] if args else Any) for v in value]
        raise ValueError("a list (comma-separated or JSON)")
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = parse_json(value)
        if isinstance(value, dict):
            return value
        raise ValueError("a JSON object")
    raise ValueError(expected(tp))  # pragma: no cover - every field type is listed above


def value_fits(value: Any, tp: Any) -> bool:
    """Whether ``value`` (plain data) has type ``tp`` as a field of :class:`RunConfig` declares it: ``int`` is
    an integer but not a bool, ``float`` also takes an integer, ``X | None``, ``list[X]``, ``dict[K, V]``, ``Any``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(value_fits(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and all(value_fits(v, args[0] if args else Any) for v in value)
    if origin is dict or tp is dict:
        key, item = args or (Any, Any)
        return isinstance(value, dict) and all(value_fits(k, key) and value_fits(v, item) for k, v in value.items())
    return True
