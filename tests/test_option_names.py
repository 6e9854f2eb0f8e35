"""One name for one thing across the CLI (docs/cli.md), the old spellings for one release, and help that reads.

The attack algorithm is ``--method``, the number of subjects ``--subjects``,
checkpoints ``--model`` (one), ``--models`` (several) or positionally; the
renamed flags (:data:`privreid.commands.common.RENAMED_OPTIONS`) still parse
to the same parameters and print one ``warning:`` line each.
"""

import json

import click
import pytest
import typer
from typer.testing import CliRunner

from privreid.cli import app
from privreid.commands.common import RENAMED_OPTIONS, renamed_args
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


def parsed(argv: list[str]) -> tuple[dict, list[str]]:
    """The parameters ``privreid argv`` gives its command (parsed as the group parses them) and the warnings."""
    group = typer.main.get_command(app)
    warnings: list[str] = []
    with click.Context(group, info_name="privreid") as ctx:
        # what privreid's group does with its command's arguments, with the warnings collected here
        name, command, rest = click.Group.resolve_command(group, ctx, list(argv))
        rest = renamed_args(name, rest, warnings.append)
        return command.make_context(name, rest, parent=ctx).params, warnings


# --------------------------------------------------------------------------- one name for one thing
def test_no_command_takes_a_renamed_spelling_as_its_own_option():
    for path, command in commands().items():
        old = {flag for renamed in RENAMED_OPTIONS.values() for flag in renamed} & flags(command)
        assert not old, f"privreid {path} declares {old}"


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


@pytest.mark.parametrize("command, old, new, value", [
    ("invert", "--n", "--subjects", "3"),
    ("invert", "--attack", "--method", "ig"),
    ("audit", "--attack", "--method", "feature"),
])
def test_an_old_spelling_parses_as_the_new_one_with_one_warning(command, old, new, value, tmp_path):
    base = [command, "--models", str(tmp_path / "a.pt")]
    now, none = parsed([*base, new, value])
    then, warned = parsed([*base, old, value])
    also, warned_eq = parsed([*base, f"{old}={value}"])
    assert then == now == also and none == []
    assert warned == warned_eq == [f"warning: {old} is deprecated; use {new}"]


def test_old_spellings_warn_once_each_and_leave_values_after_double_dash_alone():
    warned = []
    args = renamed_args("invert", ["--n", "2", "--n", "3", "--attack", "ig", "--", "--n"], warned.append)
    assert args == ["--subjects", "2", "--subjects", "3", "--method", "ig", "--", "--n"]
    assert warned == ["warning: --n is deprecated; use --subjects", "warning: --attack is deprecated; use --method"]
    assert renamed_args("train", ["--n", "2"], warned.append) == ["--n", "2"]  # only the commands that renamed it


@pytest.mark.slow
def test_an_old_spelling_runs_the_same_inversion_with_one_warning_line(tiny_synth, tmp_path):
    from privreid.data.catalog import federation_for_config
    from privreid.federated.engine import FederatedEngine

    cfg = tiny_config(tiny_synth, "fedpav", rounds=1)
    FederatedEngine(cfg, federation_for_config(cfg), tmp_path / "run", progress=False).run()
    common = ["invert", "--model", str(tmp_path / "run" / "ckpt.pt"), "--iterations", "2", "--device", "cpu"]
    new = runner.invoke(app, [*common, "--subjects", "1", "--method", "dlg", "--out", str(tmp_path / "new")])
    old = runner.invoke(app, [*common, "--n", "1", "--attack", "dlg", "--out", str(tmp_path / "old")])
    assert new.exit_code == old.exit_code == 0, old.output
    assert [line for line in old.stderr.splitlines() if "warning" in line] == [
        "warning: --n is deprecated; use --subjects", "warning: --attack is deprecated; use --method"]
    assert "warning" not in new.stderr
    metrics = [json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("new", "old")]
    assert metrics[0] == metrics[1] and metrics[0]["settings"]["attack"] == "dlg"


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
    from privreid.attacks.inversion import ATTACKS, THREATS

    text = " ".join(help_text("invert").split())
    for name in [*ATTACKS, *THREATS]:
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
