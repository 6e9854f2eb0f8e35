"""``--arch``, ``--logger`` and ``--device`` show their values in ``--help`` and refuse others while parsing, on every
command that has them, without importing torch (issue 28, section 2)."""

import click
import pytest
import typer.main

from privreid.cli import app
from privreid.commands.common import ARCHS, FILE_ARCHS, LOGGERS, DeviceType
from privreid.device import DEVICE_METAVAR, is_device_name, resolve_device
from privreid.errors import ConfigError


def options_named(flag: str) -> dict[str, click.Option]:
    """``{command path: option}`` for every command of ``privreid`` that has the option ``flag``."""
    found = {}

    def walk(command: click.Command, path: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())
        found.update({path: p for p in command.params if flag in getattr(p, "opts", ())})

    walk(typer.main.get_command(app), "")
    return found


def test_the_spelt_out_names_are_the_registries():
    from privreid.models.resnet import ARCHS as MODEL_ARCHS
    from privreid.provenance import LOGGERS as PROVENANCE_LOGGERS

    assert ARCHS == tuple(MODEL_ARCHS)
    assert LOGGERS == PROVENANCE_LOGGERS


def test_the_torchreid_names_are_torchreids():
    """``--arch`` of a model file from elsewhere takes every name of the installed torchreid's ``build_model``."""
    import warnings

    from privreid.model_names import TORCHREID_ARCHS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchreid.reid import models
    assert TORCHREID_ARCHS == tuple(sorted(vars(models)["__model_factory"]))
    assert set(ARCHS) <= set(FILE_ARCHS) and set(TORCHREID_ARCHS) <= set(FILE_ARCHS)


@pytest.mark.parametrize("flag, choices, commands", [
    ("--arch", ARCHS, {"train", "flower run"}),
    ("--arch", FILE_ARCHS, {"eval", "attack", "audit", "invert", "compare"}),
    ("--logger", LOGGERS, {"train"}),
])
def test_every_arch_and_logger_option_is_a_choice(flag, choices, commands):
    found = {path: option for path, option in options_named(flag).items()
             if flag != "--arch" or (path in {"train", "flower run"}) == (choices == ARCHS)}
    assert commands <= set(found)
    for path, option in found.items():
        assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == choices, path
        assert f"[{'|'.join(choices)}]" in option.get_help_record(click.Context(click.Command(path)))[0], path


def test_every_device_option_shows_and_checks_its_names():
    found = options_named("--device")
    assert {"train", "flower run", "eval", "attack", "audit", "invert", "compare", "sweep", "reproduce"} <= set(found)
    for path, option in found.items():
        assert isinstance(option.type, DeviceType), path
        flags, help_text = option.get_help_record(click.Context(click.Command(path)))
        assert DEVICE_METAVAR in flags and "auto" in help_text, path  # invert's help text was lost before


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_names_taken(name):
    assert is_device_name(name)
    assert DeviceType().convert(name, None, None) == name


@pytest.mark.parametrize("name", ["tpu", "mps", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda0", " cpu", "cpu ", "", None])
def test_device_names_refused(name):
    assert not is_device_name(name)
    with pytest.raises(click.BadParameter, match=r"is not one of \[auto\|cpu\|cuda\|cuda:N\]"):
        DeviceType().convert(name, None, None)
    with pytest.raises(ConfigError, match=r"^--device must be one of \[auto\|cpu\|cuda\|cuda:N\]"):
        resolve_device(name)  # a preset or --set reaches the engine without the CLI's type


def test_a_cuda_index_beyond_the_machine_is_one_line(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"^--device cuda:2: this machine has 2 CUDA device\(s\), cuda:0 to cuda:1$"):
        resolve_device("cuda:2")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="no CUDA device is available"):
        resolve_device("cuda:0")


@pytest.mark.parametrize("device", ["cuda:x", "cuda:", "cuda:0:1", "mps"])
def test_the_run_config_refuses_a_device_the_cli_would_refuse(device):
    """A preset or ``--set runtime.device=...`` is checked with the CLI's own rule (``cuda:x`` used to pass)."""
    from privreid.config import RunConfig
    from privreid.errors import ConfigError

    config = RunConfig()
    config.runtime.device = device
    with pytest.raises(ConfigError, match=r"device must be one of \[auto\|cpu\|cuda\|cuda:N\]"):
        config.validate()
