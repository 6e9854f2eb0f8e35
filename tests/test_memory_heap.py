"""The heap trimmer (issue 14: freed heap held by glibc made DPPT's server memory grow with the clients)."""

import pytest

from privreid.errors import ConfigError
from privreid.federated import heap
from privreid.federated.engine import FederatedEngine
from privreid.federated.heap import HeapTrimmer, slack_from_env

from conftest import tiny_config
from test_engine import federation
from privreid.composition import build_run


def trimmer_on(monkeypatch, resident, slack=64):
    """A trimmer reading the resident sizes ``resident`` in turn; the list of trims it makes."""
    trims = []
    levels = iter(resident)
    monkeypatch.setattr(heap, "resident_mib", lambda: next(levels))
    monkeypatch.setattr(heap, "_malloc_trim", lambda: trims.append)
    return HeapTrimmer(slack), trims


def test_trims_only_when_the_resident_set_outgrows_the_slack(monkeypatch):
    # level 1000 after client 1; 1050 and 1064 stay within 64 MiB; 1065 trims; the client after the trim
    # (1200: its working set faulted in again) sets the new level, so 1250 does not trim and 1265 does.
    trimmer, trims = trimmer_on(monkeypatch, [1000, 1050, 1064, 1065, 1200, 1250, 1265, 900])
    made = [trimmer.after_client() for _ in range(8)]
    assert made == [False, False, False, True, False, False, True, False]
    assert trims == [0, 0] and trimmer.trims == 2 and trimmer.level_mib == 900


def test_slack_off_never_trims(monkeypatch):
    trimmer, trims = trimmer_on(monkeypatch, [1000, 5000, 9000], slack=None)
    assert not any(trimmer.after_client() for _ in range(3)) and trims == []


def test_without_glibc_it_does_nothing(monkeypatch):
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    monkeypatch.setattr(heap, "resident_mib", lambda: pytest.fail("no need to read the resident set"))
    assert HeapTrimmer(0).after_client() is False


@pytest.mark.parametrize("raw, slack", [("", 64.0), ("0", 0.0), ("128.5", 128.5), ("OFF", None)])
def test_slack_from_the_environment(monkeypatch, raw, slack):
    monkeypatch.setenv(heap.SLACK_ENV, raw)
    assert slack_from_env() == slack
    assert slack_from_env(10.0) == slack  # a small model: the floor
    assert slack_from_env(44.7) == (pytest.approx(134.1) if raw == "" else slack)  # ResNet-18: 3 model copies, unless set


def test_the_engine_sizes_the_slack_by_its_model(tiny_synth, tmp_path, monkeypatch):
    from privreid.federated.engine import FederatedEngine
    from privreid.federated.policy import state_nbytes
    from test_engine import federation
    from conftest import tiny_config

    monkeypatch.delenv(heap.SLACK_ENV, raising=False)
    cfg = tiny_config(tiny_synth, rounds=1)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    model_mib = state_nbytes(engine.model.state_dict()) / 2**20
    assert engine.heap.slack_mib == max(64.0, 3 * model_mib)
    monkeypatch.setenv(heap.SLACK_ENV, "7")
    assert FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run).heap.slack_mib == 7.0


@pytest.mark.parametrize("raw", ["-1", "lots"])
def test_a_bad_slack_is_a_one_line_config_error(monkeypatch, raw):
    monkeypatch.setenv(heap.SLACK_ENV, raw)
    with pytest.raises(ConfigError, match="PRIVREID_HEAP_SLACK_MB must be a number of MiB >= 0 or 'off'"):
        slack_from_env()


def test_resident_set_is_read_on_linux():
    rss = heap.resident_mib()
    assert rss is not None and 1 < rss < 2**20


def test_the_engine_asks_after_every_client_and_trims_a_grown_heap(tiny_synth, tmp_path, monkeypatch):
    trims, calls = [], []
    monkeypatch.setattr(heap, "_malloc_trim", lambda: trims.append)
    original = HeapTrimmer.after_client
    monkeypatch.setattr(HeapTrimmer, "after_client", lambda self: calls.append(1) or original(self))
    monkeypatch.setenv(heap.SLACK_ENV, "0")  # any growth trims
    cfg = tiny_config(tiny_synth, rounds=2)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    engine.run()
    assert len(calls) == 2 * engine.clients_per_round() == 4
    assert engine.heap.slack_mib == 0 and engine.heap.trims == len(trims) <= 2
