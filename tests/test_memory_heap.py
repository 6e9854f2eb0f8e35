"""Freed heap memory goes back to the system after each client (issue 14: DPPT's server memory not flat)."""

from privreid.federated import engine as engine_module
from privreid.federated.engine import FederatedEngine
from privreid.federated.heap import release_freed_memory

from test_engine import federation
from conftest import tiny_config


def test_the_engine_releases_freed_memory_after_every_client(tiny_synth, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(engine_module, "release_freed_memory", lambda: calls.append(1))
    cfg = tiny_config(tiny_synth, rounds=2)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False)
    engine.run()
    assert len(calls) == 2 * engine.clients_per_round() == 4


def test_release_reports_whether_the_c_library_can():
    import ctypes.util
    import sys

    assert release_freed_memory() is bool(sys.platform.startswith("linux") and ctypes.util.find_library("c"))
