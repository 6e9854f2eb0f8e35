"""``privreid --help`` and every subcommand's ``--help`` import no torch (benchmarks/cli_startup.py times them).

torch alone takes seconds to import; the CLI imports it, and every other
heavy module, only inside the command that runs.  One fresh interpreter prints
every help screen, then lists what it imported.
"""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: what no help screen may import: torch and what imports it, and the numeric stack behind the data loaders
HEAVY = ("torch", "torchvision", "torchattacks", "opacus", "flwr", "numpy", "scipy", "matplotlib")

HELP_SCREENS = """
import json, sys

import typer

from privreid.cli import app


def paths(command, path):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from paths(sub, [*path, name])


shown = []
for path in paths(typer.main.get_command(app), []):
    try:
        app([*path, "--help"], prog_name="privreid")
    except SystemExit as exc:
        assert exc.code == 0, (path, exc.code)
    shown.append(" ".join(path))
print(json.dumps({"shown": shown, "imported": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_no_help_screen_imports_torch():
    proc = subprocess.run([sys.executable, "-c", HELP_SCREENS], capture_output=True, text=True, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert {"", "train", "invert", "audit", "attack", "compare", "flower run", "data synth"} <= set(report["shown"])
    assert not set(HEAVY) & set(report["imported"]), set(HEAVY) & set(report["imported"])


def test_the_startup_benchmark_measures_every_help_screen():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import cli_startup
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    lines = cli_startup.command_lines()
    assert [] in lines and ["train"] in lines and ["flower", "run"] in lines and ["data", "synth"] in lines
