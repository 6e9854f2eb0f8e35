"""docs/models.md's worked example runs as it stands (issue 27: a torchvision ResNet wrapped in three lines,
evaluated, attacked with PGD and compared with a FedPav checkpoint in one report)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

import privreid
from badinput import run_cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def _blocks(language: str) -> list[str]:
    section = DOC.read_text().split("## Worked example", 1)[1]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


@pytest.mark.slow  # about 25 s: trains, ranks, attacks and compares
def test_the_worked_example_runs(tiny_synth, tmp_path, monkeypatch, capsys):
    from conftest import tiny_config

    [train] = _blocks("bash")
    res = run_cli((*shlex.split(train)[1:], "--dry-run"))  # the command's flags exist (the tiny run trains below)
    assert res.exit_code == 0, res.stderr
    [code] = _blocks("python")
    assert 'DATA = "synth"' in code
    monkeypatch.chdir(tmp_path)
    privreid.train_run(tiny_config(tiny_synth, rounds=1), Path("runs/fedpav"))
    exec(compile(code.replace('DATA = "synth"', f"DATA = {str(tiny_synth)!r}"), str(DOC), "exec"), {})
    printed = capsys.readouterr().out
    assert "PGD drop in mAP" in printed and "report: runs/any-model/report.md" in printed
    report = Path("runs/any-model/report.md").read_text()
    assert "ResNet #1 (Python model)" in report and "fedpav (fedpav)" in report and "untrained" in report
    kinds = [m["kind"] for m in json.loads(Path("runs/any-model/report.json").read_text())["models"]]
    assert kinds == ["Python model", "privreid checkpoint"]
