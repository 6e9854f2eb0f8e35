"""What a user installs: `python -m privreid`, the project files, and (slow) a fresh venv from the wheel with plain pip."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

import privreid

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def readme_commands() -> list[tuple[str, ...]]:
    """The command paths of the README's CLI table (`privreid data synth ...` -> ("data", "synth"))."""
    commands: list[tuple[str, ...]] = []
    for line in README.splitlines():
        match = re.match(r"\| `privreid ([^`]*)`", line)
        if not match:
            continue
        path: list[str] = []
        for word in match.group(1).split():
            if not re.fullmatch(r"[a-z]+", word):
                break
            path.append(word)
        for alternative in [path[-1], *re.findall(r" / ([a-z]+)", match.group(1))]:
            command = (*path[:-1], alternative)
            if command not in commands:
                commands.append(command)
    return commands


def test_readme_lists_the_commands():
    commands = readme_commands()
    for expected in [("train",), ("eval",), ("data", "synth"), ("attack",), ("sweep",), ("export",),
                     ("flower", "superlink"), ("flower", "supernode"), ("flower", "run")]:
        assert expected in commands


def test_python_m_privreid_is_the_command_line():
    version = subprocess.run([sys.executable, "-m", "privreid", "--version"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
    assert version.returncode == 0 and version.stdout.strip() == f"privreid {privreid.__version__}"
    usage = subprocess.run([sys.executable, "-m", "privreid", "export", "--help"], capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
    assert usage.returncode == 0 and "Usage: privreid export" in usage.stdout
    bad = subprocess.run([sys.executable, "-m", "privreid", "export", "--model", "x.pt", "--out", "y",
                          "--format", "nope"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --format must be one of state-dict, torchreid, onnx, got 'nope'"]


def test_license_citation_changelog_agree_with_pyproject():
    assert PYPROJECT["license"] == {"text": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "MIT"
    assert citation["version"] == PYPROJECT["version"] == privreid.__version__
    assert f"## [{privreid.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def _imported_top_level_modules() -> set[str]:
    """Top-level names of the absolute imports anywhere in privreid's source (lazy imports included)."""
    import ast

    names: set[str] = set()
    for path in (ROOT / "privreid").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"privreid", "__future__"}


def test_every_imported_package_is_a_declared_dependency():
    """A package privreid imports but does not declare works here only while something else pulls it in
    (click came with typer until typer 0.26 vendored its own copy; a fresh install then failed)."""
    from importlib.metadata import packages_distributions

    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    declared = {normal(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
                for req in [*PYPROJECT["dependencies"], *sum(PYPROJECT["optional-dependencies"].values(), [])]}
    owners = packages_distributions()
    undeclared = {module: owners.get(module) for module in _imported_top_level_modules()
                  if not declared & {normal(d) for d in owners.get(module, [])}}
    assert undeclared == {}


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fresh_venv_from_the_wheel_gives_every_readme_command(tmp_path):
    """`pip install privreid-*.whl` in an empty venv (pip's own resolver, pyproject's ranges, no constraints)."""
    try:
        _fresh_venv(tmp_path)
    finally:  # the venv holds about 6 GB (CUDA torch): never left behind in pytest's kept tmp dirs
        shutil.rmtree(tmp_path / "venv", ignore_errors=True)


def _fresh_venv(tmp_path: Path) -> None:
    start = time.monotonic()
    src, dist, venv = tmp_path / "src", tmp_path / "dist", tmp_path / "venv"
    # a copy, so that the build's build/ and *.egg-info neither land in nor come from the working tree
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", ".lock-venv", "build", "dist", "runs", "site",
                                                             "*.egg-info", "__pycache__", ".pytest_cache"))
    # nothing of the source tree or of the test run's environment on the path
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "PRIVREID_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, src], timeout=600, env=env)
    [wheel] = dist.glob("privreid-*.whl")
    _run([sys.executable, "-m", "venv", venv], timeout=300, env=env)
    python, exe = venv / "bin" / "python", venv / "bin" / "privreid"
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel], timeout=1500, env=env,
         cwd=tmp_path)
    installed = time.monotonic()
    assert _run([python, "-m", "pip", "check"], env=env).stdout.strip() == "No broken requirements found."
    work = tmp_path / "work"
    work.mkdir()

    def cli(*args, status=0):
        proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env, cwd=work,
                              timeout=600)
        assert proc.returncode == status, f"privreid {' '.join(map(str, args))}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    for command in readme_commands():
        assert "Example: privreid" in cli(*command, "--help").stdout, command
    # the installed package, not the source tree
    probe = _run([python, "-c", "import privreid, torchattacks; print(privreid.__file__, torchattacks.__version__)"],
                 env=env, cwd=work).stdout
    assert str(venv) in probe and str(ROOT) not in probe
    assert _run([python, "-m", "privreid", "--version"], env=env, cwd=work).stdout.strip() == \
        f"privreid {privreid.__version__}"
    cli("data", "synth", "--out", work / "data", "--domains", 3, "--height", 32, "--width", 16)
    cli("train", "--method", "fedpav", "--data", work / "data", "--rounds", 1, "--height", 32, "--width", 16,
             "--feat-dim", 32, "--batch-size", 8, "--max-steps", 2, "--device", "cpu", "--quiet",
             "--out", work / "run")
    cli("attack", "--model", work / "run" / "ckpt.pt", "--method", "fgsm", "--max-queries", 4, "--examples", 0,
             "--device", "cpu", "--out", work / "adv")
    records = json.loads((work / "adv" / "results.json").read_text())["results"]
    assert records and all(r["attack"] == "fgsm" and 0 < r["max_perturbation"] <= 8 / 255 + 1e-6 for r in records)
    # the extras are not installed: one line each, exit 2
    flower = cli("flower", "run", "--insecure", "--out", work / "fl", status=2)
    assert flower.stderr.strip() == "error: privreid flower needs flwr, which is not installed: " \
                                    "pip install 'privreid[flower]'"
    onnx = cli("export", "--model", work / "run" / "ckpt.pt", "--format", "onnx", "--out", work / "m.onnx",
                    status=2)
    assert len(onnx.stderr.strip().splitlines()) == 1 and "privreid[export]" in onnx.stderr
    assert _run([python, "-m", "pip", "check"], env=env).returncode == 0
    print(f"fresh venv: install {installed - start:.0f} s, commands {time.monotonic() - installed:.0f} s")



def test_committed_notebooks_carry_their_outputs():
    """notebooks/*.ipynb are committed executed top to bottom (they read on a website without running)."""
    import nbformat

    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), path.name
        outputs = [o for c in cells for o in c.outputs]
        assert outputs and not [o for o in outputs if o.output_type == "error"], path.name
