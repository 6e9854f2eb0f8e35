"""Helpers shared by the CLI commands: one-line errors with exit status 2, comma lists, YAML presets, --opt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError, PrivreidError


def fail(msg: str) -> None:
    """Print ``error: msg`` to stderr and exit with status 2."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def csv_list(value: Optional[str]) -> Optional[list[str]]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None``/empty -> ``None``."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def run_or_exit(fn, *args, **kwargs):
    """Call ``fn`` turning user-input errors (:class:`PrivreidError`) into a one-line message + exit 2."""
    try:
        return fn(*args, **kwargs)
    except PrivreidError as exc:
        fail(str(exc))


def parse_method_options(pairs: Optional[list[str]]) -> dict:
    """``["mu=0.01", "public=/data/x"]`` -> ``{"mu": 0.01, "public": "/data/x"}`` (JSON values where they parse)."""
    out = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--opt expects key=value, got {pair!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def params_with_preset(ctx: typer.Context, preset: Optional[Path]) -> dict:
    """The command's parameters, with values from a YAML preset where no flag was given.

    Preset keys are option names (``lr-backbone`` or ``lr_backbone``);
    ``format`` maps to the ``--format`` option.
    """
    import yaml

    params = dict(ctx.params)
    if preset is None:
        return params
    if not preset.is_file():
        raise ConfigError(f"preset not found: {preset}")
    try:
        values = yaml.safe_load(preset.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{preset} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{preset} must hold a mapping of option names to values")
    for key, value in values.items():
        name = {"format": "fmt"}.get(str(key), str(key).replace("-", "_"))
        if name not in params or name == "config_file":
            raise ConfigError(f"{preset}: unknown option {key!r}")
        source = ctx.get_parameter_source(name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):  # not given on the command line
            if name in ("data", "opt") and isinstance(value, str):
                value = [value]
            if name == "opt" and isinstance(value, dict):
                value = [f"{k}={json.dumps(v)}" for k, v in value.items()]
            params[name] = value
    return params
