"""privreid.environment: the environment variables privreid reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from privreid.data import synthetic_cache
from privreid.data.synthetic_config import SynthConfig
from privreid.environment import cache_root, mib_from_env
from privreid.errors import ConfigError
from privreid.flower.site import default_state_dir


def test_cache_root_from_the_environment_or_home(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVREID_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    assert default_state_dir("s1") == tmp_path / "c" / "flower-sites" / "s1"
    monkeypatch.setenv("PRIVREID_CACHE", "~/x")
    assert cache_root() == Path.home() / "x"
    for unset in (True, False):
        if unset:
            monkeypatch.delenv("PRIVREID_CACHE")
        else:
            monkeypatch.setenv("PRIVREID_CACHE", "")
        assert cache_root() == Path.home() / ".cache" / "privreid"


def test_synthetic_cache_lands_under_the_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVREID_CACHE", str(tmp_path))
    made = []

    def generate(path, _overwrite):
        made.append(path)
        raise RuntimeError("stop")  # only the path matters here

    with pytest.raises(RuntimeError, match="stop"):
        synthetic_cache.ensure_cached("synth", SynthConfig(height=32, width=16), generate)
    assert len(made) == 1 and made[0].parent == tmp_path and made[0].name.startswith("synth-")


@pytest.mark.parametrize("raw, off, value", [
    (None, False, 12.0), ("", False, 12.0), ("  ", True, 12.0), ("0", False, 0.0), (" 2.5 ", False, 2.5),
    ("OFF", True, None), ("off", True, None),
])
def test_mib_values(monkeypatch, raw, off, value):
    if raw is None:
        monkeypatch.delenv("PRIVREID_TEST_MB", raising=False)
    else:
        monkeypatch.setenv("PRIVREID_TEST_MB", raw)
    assert mib_from_env("PRIVREID_TEST_MB", 12, off=off) == value


@pytest.mark.parametrize("raw, off, message", [
    ("-1", False, "PRIVREID_TEST_MB must be a number of MiB >= 0, got '-1'"),
    ("lots", False, "PRIVREID_TEST_MB must be a number of MiB >= 0, got 'lots'"),
    ("nan", True, "PRIVREID_TEST_MB must be a number of MiB >= 0 or 'off', got 'nan'"),
    ("inf", False, "got 'inf'"),
    ("off", False, "got 'off'"),  # 'off' only where the variable allows it
])
def test_bad_mib_values_are_one_line_config_errors(monkeypatch, raw, off, message):
    monkeypatch.setenv("PRIVREID_TEST_MB", raw)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as err:
        mib_from_env("PRIVREID_TEST_MB", 12, off=off)
    assert "\n" not in str(err.value)
