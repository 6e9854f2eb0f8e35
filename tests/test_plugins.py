"""Plugins (privreid.plugins): the example plugin package (examples/plugin-package) reaches `privreid train`,
`privreid methods`, `privreid data formats` and the Flower apps, named with --plugin, in $PRIVREID_PLUGINS or
installed (entry points); `--help` loads none unless named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from privreid import plugins
from privreid.cli import app
from privreid.data.formats import FORMATS
from privreid.federated.registry import METHODS

from conftest import prepend_sys_path, spy_on_uploads

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "plugin-package"
PACKAGE = "privreid_plugin_example"
TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--rounds", "1", "--device", "cpu", "--quiet", "--test-domains", "synthC"]


@pytest.fixture()
def fresh(monkeypatch):
    """A process that has loaded no plugin; afterwards, whatever a test's plugins registered or imported is gone."""
    monkeypatch.setenv(plugins.PLUGINS_ENV, "")  # the CLI exports --plugin here; restored afterwards
    monkeypatch.setattr(plugins, "_loaded", set())
    monkeypatch.setattr(plugins, "_distributions", {})
    prepend_sys_path(monkeypatch, str(REPO))  # sys.path as it was comes back (the CLI appends the current directory)
    before = set(sys.modules)
    with FORMATS.restoring(), METHODS.restoring():  # the registries as they were, whatever the test registered
        yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] in (PACKAGE, "fake_plugin", "site_named", "server_named"):
            del sys.modules[name]


@pytest.fixture()
def example_plugin(fresh, tmp_path, monkeypatch):
    """The example package's module on sys.path (not installed), as `privreid --plugin` finds it."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE / PACKAGE, site / PACKAGE)
    prepend_sys_path(monkeypatch, str(site))
    return site


def pid_folders_copy(synth: Path, out: Path) -> Path:
    """The tiny synthetic federation (Market-1501 layout per domain) in the example's ``pid-folders`` layout."""
    for domain in ("synthA", "synthB", "synthC"):
        for split, folder in (("train", "bounding_box_train"), ("query", "query"), ("gallery", "bounding_box_test")):
            for image in sorted((synth / domain / folder).glob("*.jpg")):
                pid, camera = image.name.split("_")[:2]
                if pid != "-1":  # junk
                    target = out / domain / split / str(int(pid)) / f"{camera.split('s')[0]}_{image.name}"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(image, target)
    return out


def test_a_plugin_named_with_plugin_trains_and_is_listed_with_its_origin(example_plugin, tiny_synth, tmp_path,
                                                                         monkeypatch):
    runner = CliRunner()
    data = pid_folders_copy(tiny_synth, tmp_path / "data")
    assert PACKAGE not in sys.modules
    res = runner.invoke(app, ["--plugin", PACKAGE, "data", "formats"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(line.startswith("pid-folders: root/{train,query,gallery}/<pid>/") and line.endswith(f"[{PACKAGE}]")
               for line in lines), res.output
    assert all(line.endswith("[built-in]") for line in lines if not line.startswith("pid-folders"))
    assert os.environ[plugins.PLUGINS_ENV] == PACKAGE  # for the processes the command starts (Flower's)

    res = runner.invoke(app, ["methods"])  # loaded once per process; $PRIVREID_PLUGINS names it from now on
    assert res.exit_code == 0, res.output
    (line,) = [line for line in res.output.splitlines() if line.startswith("fedtrim ")]
    assert line.endswith(f"trimmed mean on the server (Yin et al. 2018) [{PACKAGE}]")
    assert "fedpav         FedPav" in res.output and "options: trim=1" in res.output
    res = runner.invoke(app, ["data", "info", str(data)])  # auto-detection knows the plugin's layout
    assert res.exit_code == 0 and res.output.count("format: pid-folders") == 3, res.output

    rounds = spy_on_uploads(monkeypatch, sys.modules[f"{PACKAGE}.trimmed_mean"].TrimmedMean)
    res = runner.invoke(app, ["--plugin", PACKAGE, "train", "--method", "fedtrim", "--data", str(data), *TINY,
                              "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["method"] == "fedtrim"
    (uploads,) = rounds
    assert sorted(u.client for u in uploads) == ["synthA", "synthB"]  # read through the plugin's format
    from privreid.checkpoint import load_checkpoint

    state = load_checkpoint(tmp_path / "run" / "ckpt.pt")["global_state"]
    for key, value in state.items():  # two uploads, trim 1: nothing to drop, the plain mean
        if value.is_floating_point():
            assert torch.allclose(value, (uploads[0].state[key] + uploads[1].state[key]) / 2, atol=1e-6), key


def test_the_example_strategy_drops_the_outliers_of_each_coordinate(example_plugin):
    plugins.load_plugins([PACKAGE])
    from privreid.federated.strategy import Upload

    values = [torch.tensor([1.0, 10.0]), torch.tensor([2.0, -50.0]), torch.tensor([100.0, 20.0])]
    uploads = [Upload(f"c{i}", {"w": v}, 1) for i, v in enumerate(values)]
    trimmed = sys.modules[f"{PACKAGE}.trimmed_mean"].TrimmedMean
    assert torch.equal(trimmed(1).aggregate({"w": torch.zeros(2)}, uploads).global_state["w"], torch.tensor([2.0, 10.0]))
    assert torch.allclose(trimmed(0).aggregate({"w": torch.zeros(2)}, uploads).global_state["w"],
                          torch.tensor([103 / 3, -20 / 3]))


def _fake_installed_plugin(site: Path) -> None:
    """An installed distribution ``fake-plugin`` (its dist-info on sys.path) whose entry point registers a format."""
    dist = site / "fake_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{plugins.GROUP}]\nfake = fake_plugin:register\n")
    (site / "fake_plugin.py").write_text(
        "from privreid.data.formats import DatasetFormat, register_format\n\n\n"
        "def register():\n"
        "    register_format(DatasetFormat('fake-format', 'root/anything', lambda root: False, None))\n")


def test_installed_plugins_load_when_a_command_runs_never_for_help(fresh, tmp_path, monkeypatch):
    _fake_installed_plugin(tmp_path)
    prepend_sys_path(monkeypatch, str(tmp_path))
    runner = CliRunner()
    for args in (["data", "formats", "--help"], ["train", "--help"], ["--help"]):
        assert runner.invoke(app, args).exit_code == 0
        assert "fake_plugin" not in sys.modules, args
    res = runner.invoke(app, ["data", "formats"])
    assert res.exit_code == 0, res.output
    assert "fake-format: root/anything [fake-plugin]" in res.output  # the distribution that declared it
    assert os.environ[plugins.PLUGINS_ENV] == ""  # installed plugins: nothing to export
    plugins.load_plugins()  # once per process: the function is not called again (it would refuse the taken name)


def test_help_loads_a_named_plugin(example_plugin):
    res = CliRunner().invoke(app, ["--plugin", PACKAGE, "train", "--help"])
    assert res.exit_code == 0 and PACKAGE in sys.modules


def test_a_plugin_in_the_current_directory_is_found_after_installed_packages(fresh, tmp_path, monkeypatch):
    (tmp_path / "colorsys.py").write_text("raise RuntimeError('a file here shadowed the standard library')\n")
    (tmp_path / "site_named.py").write_text("LOADED = True\n")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["--plugin", "site_named", "--plugin", "colorsys", "data", "formats"])
    assert res.exit_code == 0, res.output
    assert sys.modules["site_named"].LOADED and sys.path[-1] == str(tmp_path)
    assert os.environ[plugins.PLUGINS_ENV] == "site_named,colorsys"


def test_a_registry_origin_is_listed_as_the_distribution_of_an_installed_plugin(monkeypatch):
    monkeypatch.setattr(plugins, "_distributions", {"mypkg": "my-dist"})
    assert [plugins.listed_origin(o) for o in ("built-in", "mypkg", "script")] == ["built-in", "my-dist", "script"]


def test_the_site_loads_its_own_plugins_never_those_the_server_names(fresh, tiny_synth, tmp_path, monkeypatch):
    from flwr.app import Message, RecordDict

    from privreid.flower.client_app import app as client_app
    from privreid.flower.loopback import LoopbackGrid
    from privreid.flower.messages import RUN, SITE, run_record

    from conftest import tiny_config

    for name in ("site_named", "server_named"):
        (tmp_path / f"{name}.py").write_text("")
    prepend_sys_path(monkeypatch, str(tmp_path))
    monkeypatch.setenv(plugins.PLUGINS_ENV, "site_named")  # `privreid --plugin site_named flower supernode`
    grid = LoopbackGrid(client_app, {1: {"data": str(tiny_synth / "synthA"), "state-dir": str(tmp_path / "state")}})
    grid.contexts[1].run_config = {"plugins": "server_named"}  # what the submitter put in the run config
    ids = grid.push_messages([Message(RecordDict({RUN: run_record(tiny_config(tiny_synth), "run")}), 1, "query")])
    (reply,) = grid.pull_messages(ids)
    assert not reply.has_error() and reply.content.config_records[SITE]["name"] == "synthA"
    assert "site_named" in sys.modules and "server_named" not in sys.modules


def test_a_flower_run_trains_the_plugin_method_the_submitter_named(example_plugin, tiny_synth, tmp_path):
    """`privreid --plugin M flower run` names M in the run config; the ServerApp loads it, then trains on the sites."""
    from flwr.app import Context, RecordDict

    from privreid.flower.client_app import app as client_app
    from privreid.flower.loopback import LoopbackGrid
    from privreid.flower.server_app import ServerSettings, main

    from conftest import tiny_config
    from test_flower import sites

    os.environ[plugins.PLUGINS_ENV] = PACKAGE  # as the submitting command line exports it
    settings = ServerSettings(tiny_config(tiny_synth, method="fedtrim", rounds=1), tmp_path / "out", poll=0.0)
    run_config = settings.to_run_config()
    assert run_config["plugins"] == PACKAGE
    os.environ[plugins.PLUGINS_ENV] = ""  # the ServerApp's process knows only the run config
    assert PACKAGE not in sys.modules
    main(LoopbackGrid(client_app, sites(tiny_synth, tmp_path)), Context(run_id=1, node_id=0, node_config={},
                                                                        state=RecordDict(), run_config=run_config))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["method"] == "fedtrim" and summary["runtime"] == "flower"


@pytest.mark.slow
def test_the_example_package_installed_with_pip_in_a_venv(tiny_synth, tmp_path):
    """`pip install -e examples/plugin-package` in a fresh venv: its entry point reaches `privreid` there."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    # the venv sees this project's environment (torch, pip, setuptools...): `python -m venv --system-site-packages`
    # from a venv's python would give the base interpreter's packages, not the venv's
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    parent = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    Path(purelib, "parent-environment.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    source = shutil.copytree(EXAMPLE, tmp_path / "plugin-package")  # a build writes its egg-info next to the code
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", plugins.PLUGINS_ENV: ""}
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-e",
                    str(source)], check=True, env=env, capture_output=True)

    def privreid(*args):
        return subprocess.run([python, "-m", "privreid", *args], capture_output=True, text=True, env=env,
                              timeout=600)

    listed = privreid("methods")
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith("fedtrim ") and line.endswith("[privreid-plugin-example]")
               for line in listed.stdout.splitlines()), listed.stdout
    data = pid_folders_copy(tiny_synth, tmp_path / "data")
    run = privreid("train", "--method", "fedtrim", "--data", str(data), *TINY, "--out", str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["method"] == "fedtrim"


def test_the_docs_show_the_example_package_as_it_is():
    section = (REPO / "docs" / "extending.md").read_text().split("## A plugin package\n", 1)[1]
    shown = section.split("```toml\n", 1)[1].split("```", 1)[0]
    assert shown == (EXAMPLE / "pyproject.toml").read_text()
    for name in ("__init__.py", "trimmed_mean.py", "pid_folders.py"):
        assert name in section and (EXAMPLE / PACKAGE / name).is_file()


def test_a_parallel_clients_worker_loads_the_plugins_the_command_line_exported(example_plugin, tiny_synth):
    """A --parallel-clients worker (a Ray process) builds the run's engine after the plugins in $PRIVREID_PLUGINS."""
    from privreid.flower import simulation

    from conftest import tiny_config

    os.environ[plugins.PLUGINS_ENV] = PACKAGE  # what `privreid --plugin ... train --parallel-clients K` exported
    simulation.worker_engine.cache_clear()
    try:
        engine = simulation.worker_engine(json.dumps(tiny_config(tiny_synth, method="fedtrim").to_dict()))
    finally:
        simulation.worker_engine.cache_clear()
    assert engine.method.name == "fedtrim" and sorted(engine.by_name) == ["synthA", "synthB"]
