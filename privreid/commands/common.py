"""Helpers shared by the CLI commands: one-line errors with exit status 2, comma lists, YAML presets, --opt."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Optional

import click
import typer

from privreid.device import DEVICE_METAVAR, is_device_name
from privreid.model_names import INTERPOLATIONS, TORCHREID_ARCHS
from privreid.errors import ConfigError, PrivreidError


#: ``--data``'s help, shared by the commands that read datasets
DATA_HELP = ("Dataset: 'synth' (default, the embedded synthetic federation), 'synth-vi' / 'synth-vi-video' "
             "(the embedded synthetic visible-infrared entities, as images / tracklets), a `privreid data synth` "
             "directory, a dataset root (Market-1501, DukeMTMC-reID, CUHK03-NP, MSMT17; visible-infrared: "
             "SYSU-MM01, RegDB, LLCM, HITSZ-VCM, BUPTCampus; see docs/vi-datasets.md), or a folder of "
             "dataset roots. Repeat for several datasets, each read in its own layout: DIR:FORMAT names it "
             "(`privreid data formats`), otherwise --format applies.")


#: the backbones ``--arch`` takes (the names of :data:`privreid.models.resnet.ARCHS`, spelt out so that ``--help``
#: imports no torch; tests/test_cli_choices.py keeps the two equal)
ARCHS = ("resnet18", "resnet34", "resnet50")
#: what ``--arch`` takes for a model file from elsewhere: privreid's ResNets and every name of torchreid's models
#: (:data:`~privreid.models.external.torchreid_models.TORCHREID_ARCHS`; built by torchreid, ``privreid[torchreid]``)
FILE_ARCHS = (*ARCHS, *sorted(set(TORCHREID_ARCHS) - set(ARCHS)))
#: the metric loggers ``train --logger`` takes (:data:`privreid.provenance.LOGGERS`, spelt out and kept equal the same
#: way: the help imports neither)
LOGGERS = ("none", "tensorboard", "wandb")


class DeviceType(click.ParamType):
    """``--device``'s values (:data:`~privreid.device.DEVICE_METAVAR`): the help shows them, and a misspelt one is
    refused while the command line is parsed, without importing torch (whether the machine has the device is
    :func:`~privreid.device.resolve_device`'s to say)."""

    name = "device"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return DEVICE_METAVAR

    def convert(self, value, param, ctx):
        if not is_device_name(value):
            self.fail(f"{value!r} is not one of {DEVICE_METAVAR}", param, ctx)
        return value


#: ``--device``, the same on every command that runs a model: ``device: DeviceOption = "auto"``
DeviceOption = Annotated[str, typer.Option(help="Where models run: CUDA when available (auto), the CPU or a CUDA "
                                           "device.", click_type=DeviceType())]

#: how a model file from elsewhere is read (docs/models.md): the same three options on every command that takes models
ArchOption = Annotated[Optional[str], typer.Option("--arch", help="A model file from elsewhere: its architecture. "
                                                   "A ResNet is read from the file's keys and checked against "
                                                   "this; any other torchreid model (torchreid files do not record "
                                                   "which) is built by torchreid itself, which needs "
                                                   "privreid[torchreid] (`privreid methods` lists the names).",
                                                   click_type=click.Choice(FILE_ARCHS))]
HeightOption = Annotated[Optional[int], typer.Option("--height", help="A model file from elsewhere that records no "
                                                     "input size: its input height (default 256, torchreid's "
                                                     "and fast-reid's).")]
WidthOption = Annotated[Optional[int], typer.Option("--width", help="The same for the width (default 128).")]
MeanOption = Annotated[Optional[str], typer.Option("--mean", help="A model file from elsewhere that records no "
                                                   "normalisation: its per-channel mean of [0, 1] pixels, e.g. "
                                                   "0.5,0.5,0.5 (default: ImageNet's, as torchreid and fast-reid).")]
StdOption = Annotated[Optional[str], typer.Option("--std", help="The same for the standard deviation.")]
InterpolationOption = Annotated[Optional[str], typer.Option(
    "--interpolation", help="A model file from elsewhere: the test resize (default: its project's, bicubic for "
    "fast-reid, bilinear otherwise; the load line says which).", click_type=click.Choice(INTERPOLATIONS))]


def fail(msg: str, code: int = 2) -> None:
    """Print ``error: msg`` to stderr and exit with status ``code`` (2: bad input)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def usage_error_line(exc: click.ClickException, ctx: click.Context | None = None) -> None:
    """A command-line parse error (click's usage box) as one ``error:`` line naming the help to read (that of the
    command it names, else of ``ctx``'s), exit 2."""
    ctx = getattr(exc, "ctx", None) or ctx
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    fail(" ".join(exc.format_message().split()) + hint)


def _refuse_empty_path(callback):
    """An option callback that refuses an empty path (``--out ""`` is the current directory, never what was meant)."""

    def check(ctx, param, value):
        if value == "" or (isinstance(value, (list, tuple)) and "" in value):
            raise click.BadParameter("an empty path (it would be the current directory); name a file or folder",
                                     ctx, param)
        return callback(ctx, param, value) if callback is not None else value

    return check


def refuse_empty_paths(command: click.Command) -> None:
    """Every path option and argument of ``command`` and of its subcommands refuses an empty path
    (:func:`_refuse_empty_path`), and every ``--seed`` a value outside 0..:data:`~privreid.config.MAX_SEED` (what
    numpy's and torch's generators take); ``privreid``'s group applies it once, to the whole command tree."""
    for param in _all_params(command):
        if isinstance(param.type, click.Path):
            param.callback = _refuse_empty_path(param.callback)
        elif param.name == "seed" and isinstance(param.type, click.types.IntParamType):
            param.callback = _bounded_seed(param.callback)


def _all_params(command: click.Command) -> Iterator[click.Parameter]:
    yield from command.params
    for sub in getattr(command, "commands", {}).values():
        yield from _all_params(sub)


def _bounded_seed(callback):
    """An option callback that refuses a seed the random generators cannot take."""
    from privreid.config import MAX_SEED

    def check(ctx, param, value):
        if value is not None and not 0 <= value <= MAX_SEED:
            raise click.BadParameter(f"seed must be in 0..{MAX_SEED} (got {value})", ctx, param)
        return callback(ctx, param, value) if callback is not None else value

    return check


def csv_list(value: Optional[str]) -> Optional[list[str]]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None``/empty -> ``None``."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def csv_names(value: Optional[str], option: str) -> Optional[list[str]]:
    """``"a,b"`` -> ``["a", "b"]``; ``None`` -> ``None``; :class:`ConfigError` naming ``option`` for an empty value
    or an empty item (``1,,2``, ``''``), which a typo makes and which would otherwise mean "all" or be skipped."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise ConfigError(f"{option} takes comma-separated values, none of them empty (got {value!r})")
    return items


def run_or_exit(fn, *args, **kwargs):
    """Call ``fn`` turning user-input errors (:class:`PrivreidError`) and OS errors (a read-only or full
    disk, a file in the way of an output) into a one-line message + exit 2.

    A broken pipe (the reader of stdout left: ``privreid ... | head``) is not an error of the command: it
    is raised on to click, which exits quietly with status 1 (the run directory stays as a stop leaves it).
    """
    from privreid.rundir import os_error_message

    try:
        return fn(*args, **kwargs)
    except PrivreidError as exc:  # a run stopped by a signal exits as the shell would (130, 143)
        fail(str(exc), getattr(exc, "exit_code", 2))
    except BrokenPipeError:
        raise
    except OSError as exc:
        fail(os_error_message(exc))


def checkpoint_paths(model: Optional[Path], models: Optional[list[Path]],
                     more_models: Optional[list[Path]]) -> list[Path]:
    """The checkpoints given with ``--model``, ``--models`` and the ``[CKPT]...`` that follow them, in that order;
    :class:`ConfigError` when there are none."""
    if model is not None and models:
        raise ConfigError("give one checkpoint with --model or several with --models, not both")
    paths = [p for p in [model, *(models or []), *(more_models or [])] if p is not None]
    if not paths:
        raise ConfigError("give a checkpoint with --model (or several with --models a.pt b.pt)")
    return paths


@contextmanager
def run_dir_or_exit(out: Optional[Path], command: str) -> Iterator[Optional[Path]]:
    """The block runs inside the run directory ``out`` (:func:`privreid.provenance.open_run`: checked, locked,
    provenance and ``log.txt``); a refusal is one line and exit 2.  ``out=None``: no run directory."""
    if out is None:
        yield None
        return
    from privreid.provenance import open_run

    with ExitStack() as stack:
        yield run_or_exit(stack.enter_context, open_run(out, command))


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

    Preset keys are option names (``lr-backbone`` or ``lr_backbone``, ``format`` for ``--format``, ``set`` for
    ``--set``).  Every value goes through the option's own click type, as if typed on the command line
    (:func:`preset_value`): ``lr-backbone: 5e-3`` (a string to YAML) is the float 0.005, ``dp-sgd: "false"`` is False,
    ``rounds: 2.7`` is an error.  A bad value raises :class:`ConfigError` naming the preset and the key.
    """

    params = dict(ctx.params)
    if preset is None:
        return params
    preset = Path(preset)  # typer converts to Path in the command's wrapper only; ctx.params hold strings
    values = load_yaml_file(preset, "preset") or {}
    if not isinstance(values, dict):
        raise ConfigError(f"{preset} must hold a mapping of option names to values")
    options = {p.name: p for p in ctx.command.params}
    by_flag = {o[2:]: p.name for p in ctx.command.params for o in getattr(p, "opts", []) if o.startswith("--")}
    for key, value in values.items():
        name = by_flag.get(str(key), str(key).replace("-", "_"))
        if name not in params or name not in options or name == "config_file":
            raise ConfigError(f"{preset}: unknown option {key!r}")
        source = ctx.get_parameter_source(name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):  # not given on the command line
            try:
                params[name] = preset_value(ctx, options[name], value)
            except ConfigError as exc:
                raise ConfigError(f"{preset}: {key}: {exc}") from None
    return params


def load_yaml_file(path: Path, what: str = "file"):
    """The YAML document in ``path``; :class:`ConfigError` (one line) for a path that is missing or not a regular
    file, bytes that are not UTF-8 text (a binary or UTF-16 file), invalid YAML, or a mapping that repeats a key
    (``rounds: 1`` then ``rounds: 3``: YAML would keep the last one silently), naming the key and both lines."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{what} not found: {path}")
    if not path.is_file():
        raise ConfigError(f"{what} {path} is {'a directory' if path.is_dir() else 'not a regular file'}; give a "
                          "YAML file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x}); a "
                          f"{what} is a YAML file saved as UTF-8") from None
    loader, duplicate = _unique_key_loader()
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader
    except duplicate as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from exc


@functools.cache
def _unique_key_loader():
    import yaml

    class DuplicateKey(yaml.YAMLError):
        """A mapping that repeats a key."""

    class UniqueKeyLoader(yaml.SafeLoader):
        """YAML's safe loader, refusing a mapping that repeats a key (which PyYAML resolves silently: last wins)."""

        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise DuplicateKey(f"the key {key!r} is given twice (lines {seen[key]} and {line}); keep one")
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader, DuplicateKey


def _as_typed(value) -> str:
    """A YAML scalar as a user would type it on the command line (``true``, ``300``, ``0.005``, ``market``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ConfigError(f"expected a single value, got {type(value).__name__} {value!r}")


def preset_value(ctx, param, value):
    """``value`` (from YAML) converted by ``param``'s click type, as the command line would convert it.

    Scalars are rendered as the text a user would type (:func:`_as_typed`) and parsed by the option's type, checked
    as flags are.  An integer option takes a YAML integer only (``rounds: "3"`` and ``rounds: 2.7`` are refused, as a
    quoted or fractional count is a mistake); a number option also takes text, because YAML 1.1 reads ``5e-3`` as a
    string.  Repeatable options (``--data``, ``--opt``) take a scalar or a list; ``opt`` also takes a mapping
    (``{mu: 0.01}``).  ``null`` is accepted only for options whose default is "not given".
    """
    import click

    if value is None:
        if param.multiple or param.default is None:
            return [] if param.multiple else None
        raise ConfigError("a value is required (null given)")
    if isinstance(param.type, click.types.IntParamType) and not param.multiple \
            and isinstance(value, (bool, float, str)):
        quoted = " (quoted, it is text in YAML: write the number without quotes)" \
            if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() else ""
        raise ConfigError(f"{_as_typed(value)!r} is not a valid integer{quoted}")
    if param.multiple:
        if param.name == "opt" and isinstance(value, dict):
            value = [f"{k}={json.dumps(v)}" for k, v in value.items()]
        items = value if isinstance(value, list) else [value]
        text = [_as_typed(v) for v in items]
    else:
        text = _as_typed(value)
    try:
        return param.type_cast_value(ctx, text)
    except click.BadParameter as exc:
        raise ConfigError(exc.message) from None
