"""One name for one thing across the CLI (docs/cli.md), and help that reads.

The attack algorithm is ``--method``, the number of subjects ``--subjects``,
checkpoints ``--model`` (one), ``--models`` (several) or positionally.
privreid has never been released, so spellings used during its development
(``--attack``, ``--n``) are not options: they are refused like any unknown flag.
"""

import json

import click
import pytest
import typer
from typer.testing import CliRunner

from privreid.cli import app
from privreid.commands.options import PANELS

from conftest import tiny_config

runner = CliRunner()
TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2", "--device",
        "cpu", "--quiet"]


def commands() -> dict[str, click.Command]:
    """Every command of the CLI by its path (``train``, ``data synth``, ...)."""
    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}".strip())
        if not hasattr(command, "commands"):
            yield path, command

    return dict(walk(typer.main.get_command(app), ""))


def flags(command: click.Command) -> set[str]:
    return {o for p in command.params for o in p.opts + p.secondary_opts if o.startswith("--")}


# --------------------------------------------------------------------------- one name for one thing
def test_commands_that_take_several_checkpoints_take_one_with_model_and_more_positionally():
    several = {path: c for path, c in commands().items() if "--models" in flags(c)}
    assert set(several) == {"attack", "audit", "compare", "invert"}
    for path, command in several.items():
        assert "--model" in flags(command), path
        [positional] = [p for p in command.params if isinstance(p, click.Argument)]
        assert positional.nargs == -1, path
    for path in ("eval", "export"):  # one checkpoint
        assert "--model" in flags(commands()[path]) and "--models" not in flags(commands()[path])


def test_attack_algorithms_are_method_and_subjects_are_subjects_everywhere():
    for path in ("attack", "audit", "invert"):
        assert "--method" in flags(commands()[path]), path
    for path in ("invert", "sweep", "compare"):
        assert "--subjects" in flags(commands()[path]), path


@pytest.mark.parametrize("command, old", [("invert", "--n"), ("invert", "--attack"), ("audit", "--attack")])
def test_a_development_spelling_is_refused_as_an_unknown_option_in_one_line(command, old, tmp_path):
    res = runner.invoke(app, [command, "--models", str(tmp_path / "a.pt"), old, "1"])
    assert res.exit_code == 2
    [line] = res.output.splitlines()
    assert line.startswith(f"error: No such option '{old}'"), res.output


# --------------------------------------------------------------------------- help that reads
def help_text(*path: str) -> str:
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "250"})  # one line per option: rich wraps at 80
    assert res.exit_code == 0, res.output
    return res.output


def test_train_help_groups_its_options_in_panels_in_order():
    text = help_text("train")
    at = [text.index(f"─ {panel} ─") for panel in PANELS]
    assert at == sorted(at)
    command = commands()["train"]
    assert all(p.rich_help_panel in PANELS for p in command.params if isinstance(p, click.Option) and
               p.name != "help"), [p.name for p in command.params if getattr(p, "rich_help_panel", None) is None]


def test_choices_show_as_choices():
    text = help_text("train")
    for choices in ("[sgd|adam]", "[step|once|local-step|none]", "[euclidean|cosine]", "[torchreid|devkit]",
                    "[upload|download|both]", "[linear|bnneck|none]", "[by-dataset|by-camera|by-identity|ci|ei|es]"):
        assert choices in text
    assert "[l2|cosine]" in help_text("invert")


def test_extras_in_help_are_not_eaten_by_markup():
    assert "pip install 'privreid[tensorboard]'" in " ".join(help_text("train").split())
    assert "privreid[export]" in " ".join(help_text("export").split())


def test_invert_help_names_every_registered_inversion_attack_and_threat_model():
    from privreid.inversion import INVERSION_ATTACKS, THREATS

    text = " ".join(help_text("invert").split())
    for name in [*INVERSION_ATTACKS, *THREATS]:
        assert f"{name} (" in text, name


def test_shell_completion_is_on():
    text = help_text()
    assert "--install-completion" in text and "--show-completion" in text


# --------------------------------------------------------------------------- train's last words
def test_train_ends_with_a_short_readable_summary(tiny_synth, tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(app, ["train", "--data", str(tiny_synth), "--rounds", "1", *TINY, "--test-domains", "synthC",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    tail = res.stdout.splitlines()[-6:]
    seen = summary["global_seen"]
    assert tail[0].startswith(f"fedpav: 1 round(s) in {summary['wall_time_s']:.1f} s")
    assert f"  global model, seen test sets: R1 {100 * seen['rank1']:.1f}%  mAP {100 * seen['mAP']:.1f}%" in tail
    assert tail[-2:] == [f"run directory: {out}", f"everything else: {out / 'summary.json'}"]
    assert "{" not in res.stdout and "per_testset" not in res.stdout
