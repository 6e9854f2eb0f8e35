"""The README starts a new user: it is short, every command and link in it exists, and its quick start runs
(issue 28, section 1).  The topics it used to hold live in docs/ and are tested there."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import click
import pytest
import typer

import privreid
from badinput import run_cli
from privreid.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def readme_command_lines() -> list[str]:
    """Every `privreid ...` command of the README: its bash blocks, and its commands table with the optional
    parts ([...]) kept and the first of each alternative (a|b) chosen."""
    lines = [line.split("  #", 1)[0].strip() for block in _blocks(README, "bash") for line in block.splitlines()
             if line.startswith("privreid ")]
    for cell in re.findall(r"^\| `(privreid [^`]*)`", README, flags=re.M):
        if " / " not in cell:  # `privreid flower superlink / supernode / run` names three commands
            lines.append(re.sub(r"(\S+)(\\\|\S+)+", r"\1", cell.replace("[", "").replace("]", "")))
    return lines


def _parse(line: str) -> None:
    """Parse ``line`` with privreid's own command-line parser: every option exists and every value has its type."""
    from privreid.cli import app

    command: click.Command = typer.main.get_command(app)
    args = shlex.split(line)[1:]
    ctx = None
    while isinstance(command, click.Group):
        ctx = click.Context(command, parent=ctx, info_name=command.name)
        name, args = args[0], args[1:]
        command = command.get_command(ctx, name)
        assert command is not None, f"{line}: no command {name!r}"
    command.make_context(command.name, list(args), parent=ctx)


def test_readme_is_the_short_start_the_issue_asks_for():
    assert len(README.splitlines()) <= 250
    assert [title for title in re.findall(r"^## (.+)$", README, flags=re.M)] == [
        "Install", "Quick start", "The demo", "Commands", "Documentation", "Papers"]
    assert "pip install privreid" not in README.replace("`pip install privreid` does not resolve", "")


@pytest.mark.parametrize("line", readme_command_lines())
def test_every_readme_command_parses(line):
    _parse(line)


def test_the_parse_check_refuses_a_wrong_option():
    with pytest.raises(click.UsageError):
        _parse("privreid eval --model m.pt --no-such-option 1")
    with pytest.raises(click.BadParameter):
        _parse("privreid train --rounds many")


def test_every_readme_link_is_a_file():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert "docs/api.md" in targets and "docs/install.md" in targets
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).is_file()]
    assert not missing, f"README links to missing files: {missing}"
    documented = {t.removeprefix("docs/") for t in targets if t.startswith("docs/")}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert not pages - documented - {"index.md"}, "a docs/ page missing from the README's map"


@pytest.mark.slow  # about 15 s: trains, exports, evaluates twice
def test_the_quick_start_runs_as_written(tiny_synth, tmp_path, monkeypatch, capsys):
    """The quick start's commands at tiny size: the training settings are overridden (later flags win), the
    torchreid file is a privreid export, Market-1501 the tiny synthetic data."""
    monkeypatch.chdir(tmp_path)
    tiny = ("--data", str(tiny_synth), "--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8",
            "--max-steps", "2", "--rounds", "1", "--device", "cpu", "--quiet")
    [bash] = _blocks(_section("Quick start"), "bash")
    train, ours, theirs = [shlex.split(line.split("  #", 1)[0])[1:] for line in bash.strip().splitlines()]
    assert run_cli((*train, *tiny)).exit_code == 0
    assert run_cli(("export", "--model", "runs/fedpav/ckpt.pt", "--format", "torchreid",
                    "--out", "model.pth.tar-60")).exit_code == 0
    res = run_cli((*ours, "--device", "cpu"))
    assert res.exit_code == 0, res.stderr
    theirs = [{"resnet50": "resnet18", "/data/Market-1501": str(tiny_synth)}.get(a, a) for a in theirs]
    res = run_cli((*theirs, "--device", "cpu"))
    assert res.exit_code == 0, res.stderr
    assert "mAP" in res.stdout


@pytest.mark.slow  # about 30 s: trains on the built-in synthetic federation, exports, evaluates twice
def test_the_python_snippet_runs_as_written(tmp_path, monkeypatch, capsys):
    """Issue 40: the README's Python, unchanged, in an empty directory: it trains, exports and evaluates the
    export; run again, the Python API's refusal names its keyword (overwrite=True), not a flag."""
    [code] = _blocks(_section("Quick start"), "python")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    ours, theirs = [ast.literal_eval(line) for line in capsys.readouterr().out.strip().splitlines()[-2:]]
    assert ours.keys() == theirs.keys() == {"synthA", "synthB", "synthC", "synthD"}
    assert all(0 <= mAP <= 1 for mAP in [*ours.values(), *theirs.values()])
    assert privreid.Checkpoint.load("runs/fedpav-python/ckpt.pt").round == 1
    assert "privreid torchreid export" in privreid.evaluate("fedpav.pth.tar", "synth").model["kind"]
    with pytest.raises(ConfigError, match=r"pass overwrite=True to replace it or resume=True") as exc:
        exec(compile(code, "README.md", "exec"), {})
    assert "--" not in str(exc.value)
    res = run_cli(("train", "--out", "runs/fedpav-python", "--rounds", "1", "--height", "32", "--width", "16"))
    assert "pass --overwrite to replace it or --resume" in res.stderr  # the command line names its flags
