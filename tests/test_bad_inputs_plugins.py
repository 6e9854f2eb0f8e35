"""Plugins that cannot be loaded: one ``error:`` line naming the plugin and the exception, exit 2, nothing written
(tests/badinput.py; issue 27 section 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from badinput import BadInput, check_refused
from conftest import prepend_sys_path
from privreid import plugins

TRAIN = ("train", "--data", "{synth}", "--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8",
         "--max-steps", "2", "--rounds", "1", "--device", "cpu", "--quiet", "--out", "{tmp}/out")


def _module(name: str, text: str):
    def setup(tmp: Path) -> None:
        (tmp / f"{name}.py").write_text(text)
    return setup


CASES = [
    BadInput("missing-module", ("--plugin", "no.such.module", *TRAIN), keep=("out",),
             says="plugin 'no.such.module' failed to load: ModuleNotFoundError: No module named 'no'"),
    BadInput("missing-module-from-env", ("methods",), env={plugins.PLUGINS_ENV: "fine_plugin, no_such_plugin"},
             setup=_module("fine_plugin", ""), says="plugin 'no_such_plugin' failed to load: ModuleNotFoundError"),
    BadInput("not-a-module-path", ("--plugin", "my plugin.py", *TRAIN), keep=("out",),
             says="plugin 'my plugin.py' is not a module path"),
    BadInput("raises-at-import", ("--plugin", "raising_plugin", *TRAIN), keep=("out",),
             setup=_module("raising_plugin", "raise RuntimeError('the plugin is broken\\nsee its log')\n"),
             says="plugin 'raising_plugin' failed to load: RuntimeError: the plugin is broken see its log"),
    BadInput("function-raises", ("--plugin", "func_plugin:register", *TRAIN), keep=("out",),
             setup=_module("func_plugin", "def register():\n    raise KeyError('x')\n"),
             says="plugin 'func_plugin:register' failed to load: KeyError: 'x'"),
    BadInput("missing-function", ("--plugin", "attr_plugin:regster", *TRAIN), keep=("out",),
             setup=_module("attr_plugin", "def register():\n    pass\n"),
             says="plugin 'attr_plugin:regster' failed to load: AttributeError"),
    BadInput("duplicate-format", ("--plugin", "dup_format", *TRAIN), keep=("out",),
             setup=_module("dup_format", "from privreid.data.formats import get_format, register_format\n"
                                         "register_format(get_format('market1501')[0])\n"),
             says="plugin 'dup_format' failed to load: ConfigError: dataset format 'market1501' is already registered"),
    BadInput("duplicate-method", ("--plugin", "dup_method", *TRAIN), keep=("out",),
             setup=_module("dup_method", "import dataclasses\n"
                                         "from privreid.federated.registry import get_method, register\n"
                                         "register(dataclasses.replace(get_method('fedpav'), summary='mine'))\n"),
             says="method 'fedpav' is already registered"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_plugin_that_cannot_load_is_refused(case, tmp_path, tiny_synth, monkeypatch):
    monkeypatch.setenv(plugins.PLUGINS_ENV, "")
    monkeypatch.setattr(plugins, "_loaded", set())
    prepend_sys_path(monkeypatch, tmp_path)  # the case's plugin modules; sys.path as it was comes back
    check_refused(case, tmp_path, synth=tiny_synth)
