"""The third-party stack: ranges in pyproject.toml, tested versions in constraints.txt, a clean `pip check`,
torchattacks as the attacks' base, optional extras that fail in one line."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import torch
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PRIVATE_FLWR = ("flwr.supercore", "flwr.common.serde", "flwr.proto", "flwr.server", "flwr.client",
                "flwr.superlink", "flwr.supernode")


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return pins


def requirements(group: str | None = None) -> dict[str, Requirement]:
    items = PYPROJECT["dependencies"] if group is None else PYPROJECT["optional-dependencies"][group]
    return {Requirement(r).name.lower(): Requirement(r) for r in items}


def test_core_dependencies_are_ranges_and_flower_is_an_extra():
    core = requirements()
    assert not [r for r in core.values() if any(s.operator in ("==", "===") for s in r.specifier)]
    assert "flwr" not in core and "flwr" in requirements("flower")
    assert {"onnx", "onnxscript", "onnxruntime"} <= set(requirements("export"))
    # the torch a user already has is accepted from the oldest Opacus supports upwards
    assert Version("2.6.0") in core["torch"].specifier and Version("2.14.1") in core["torch"].specifier
    for python in ("3.11", "3.12"):
        assert Version(python) in Requirement(f"python{PYPROJECT['requires-python']}").specifier


def test_the_tested_versions_satisfy_the_ranges_and_are_installed():
    pins = constraints()
    for group in (None, "flower", "export", "test"):
        for name, req in requirements(group).items():
            assert Version(pins[name]) in req.specifier, (name, pins[name], str(req))
    for name in ("torch", "torchvision", "opacus", "kornia", "scikit-image", "numpy", "torchattacks", "flwr",
                 "onnx", "onnxruntime"):
        assert md.version(name) == pins[name], f"{name}: installed {md.version(name)}, tested {pins[name]}"


def test_pip_check_is_clean():
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_torchattacks_declares_nothing_that_pins_the_user_environment_and_runs():
    import torchattacks

    assert Version(md.version("torchattacks")) in requirements()["torchattacks"].specifier
    assert not md.requires("torchattacks")  # 3.4 / 3.5 pin requests~=2.25.1
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3)).eval()
    x = torch.rand(2, 3, 4, 4)
    adv = torchattacks.PGD(model, eps=4 / 255, alpha=1 / 255, steps=3)(x, torch.tensor([0, 1]))
    assert adv.shape == x.shape
    assert (adv - x).abs().max() <= 4 / 255 + 1e-6
    assert adv.min() >= 0 and adv.max() <= 1


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def test_flower_is_confined_and_its_internals_to_the_loopback_harness():
    package = ROOT / "privreid"
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).as_posix()
        flwr = [n for n in _imports(path) if n == "flwr" or n.startswith("flwr.")]
        # defenses/secure_aggregation/: SecAgg+ on Flower's primitives, imported only under --secure-aggregation after require("flwr");
        # defenses/robust/rules.py: the robust rules on Flower's aggregate_* functions, imported inside the rules
        # after RobustRule.wrap's require("flwr")
        if not rel.startswith(("flower/", "defenses/secure_aggregation/")) and rel != "defenses/robust/rules.py":
            assert not flwr, f"{rel} imports {flwr}: the core must work without privreid[flower]"
        # defenses/secure_aggregation/protocol.py: the key pairs of SecAgg+ come from flwr.supercore.primitives.asymmetric in flwr 1.41,
        # the module Flower's own secaggplus_mod imports them from (pyproject pins flwr's minor release)
        # defenses/secure_aggregation/flower.py: Flower's SecAgg+ entry points, secaggplus_mod (flwr.client.mod) and
        # SecAggPlusWorkflow (flwr.server.workflow), which flwr 1.41 offers only through its legacy server API
        # defenses/robust/rules.py: flwr.server.strategy.aggregate's aggregate_krum / _median / _trimmed_avg /
        # _bulyan, the functions Flower's own robust strategies call (issue 30 asks to reuse them)
        if rel not in ("flower/loopback.py", "defenses/secure_aggregation/protocol.py", "defenses/secure_aggregation/flower.py",
                       "defenses/robust/rules.py"):
            assert not [n for n in flwr if n.startswith(tuple(p + "." for p in PRIVATE_FLWR)) or n in PRIVATE_FLWR], \
                f"{rel}: private Flower API"
            assert "privreid.flower.loopback" not in _imports(path), f"{rel} uses the test harness"


MISSING = """
import json, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # import fails with ModuleNotFoundError, as when not installed
from typer.testing import CliRunner
from privreid.cli import app
results = []
for args in json.loads(sys.argv[2]):
    res = CliRunner().invoke(app, args)
    results.append([res.exit_code, res.output.splitlines()])
print(json.dumps(results))
"""


def run_without(modules: str, *commands: list) -> list[tuple[int, list[str]]]:
    """Each command's exit status and output lines, in a fresh interpreter where ``modules`` cannot be imported."""
    proc = subprocess.run([sys.executable, "-c", MISSING, modules, json.dumps([[str(a) for a in c] for c in commands])],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return [tuple(r) for r in json.loads(proc.stdout.splitlines()[-1])]


def test_attacks_without_torchattacks_are_one_line_with_the_install_hint(tmp_path):
    sweep = ["sweep", "--param", "noise-multiplier", "--values", "1", "--out", tmp_path / "sweep", "--method", "fedpav",
             "--rounds", "1", "--height", "32", "--width", "16", "--max-steps", "1", "--device", "cpu", "--quiet"]
    results = run_without("torchattacks",
                          ["attack", "--model", tmp_path / "ckpt.pt", "--out", tmp_path / "adv"],
                          ["compare", "--models", tmp_path / "a.pt", "--suite", "attacks", "--out", tmp_path / "rep"],
                          sweep)
    for code, lines in results:
        assert code == 2 and len(lines) == 1, lines
        assert lines[0].startswith("error: ") and "pip install 'torchattacks>=3.3.0,<3.4'" in lines[0]
    assert not list(tmp_path.iterdir())  # the sweep trained no reference run: nothing written


def test_flower_without_the_extra_is_one_line_but_its_help_works(tmp_path):
    (code, lines), *helps = run_without("flwr", ["flower", "run", "--insecure", "--out", tmp_path / "run"],
                                        *[["flower", sub, "--help"] for sub in ("superlink", "supernode", "run")])
    assert code == 2 and len(lines) == 1 and "pip install 'privreid[flower]'" in lines[0], lines
    for code, lines in helps:
        assert code == 0 and any("Example: privreid flower" in line for line in lines)


def test_a_broken_torchattacks_names_what_it_misses(tmp_path):
    [(code, lines)] = run_without("scipy", ["attack", "--model", tmp_path / "ckpt.pt"])
    assert code == 2 and len(lines) == 1 and "torchattacks (it cannot import scipy)" in lines[0], lines


def test_secure_aggregation_without_flower_is_one_line_before_anything_is_written(tiny_synth, tmp_path):
    [(code, lines)] = run_without("flwr", ["train", "--data", tiny_synth, "--secure-aggregation", "--rounds", "1",
                                           "--height", "32", "--width", "16", "--max-steps", "1", "--device", "cpu",
                                           "--quiet", "--out", tmp_path / "run"])
    assert code == 2 and lines == ["error: --secure-aggregation (SecAgg+ on Flower's primitives) needs flwr, which "
                                   "is not installed: pip install 'privreid[flower]'"], lines
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_a_robust_rule_without_flower_is_one_line_before_anything_is_written(tiny_synth, tmp_path):
    """The robust rules run Flower's aggregate_* functions: without flwr, one line naming the extra."""
    [(code, lines)] = run_without("flwr", ["train", "--data", tiny_synth, "--num-clients", "3", "--protocol",
                                           "by-identity", "--set", "robustness.defenses.robust-median={}",
                                           "--rounds", "1", "--height", "32", "--width", "16", "--max-steps", "1",
                                           "--device", "cpu", "--quiet", "--out", tmp_path / "run"])
    assert code == 2 and len(lines) == 1 and "pip install 'privreid[flower]'" in lines[0], lines
    assert "robust-median" in lines[0]
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
