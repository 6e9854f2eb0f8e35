"""Client memories on disk (issue 14, part 1): loaded one at a time, written when changed, exact round trip."""

import pytest
import torch

from privreid.checkpoint import load_checkpoint
from privreid.federated import memory_store
from privreid.federated.engine import FederatedEngine
from privreid.federated.memory_store import ClientMemories

from test_engine import federation
from conftest import kill_in_round, tiny_config


def test_memories_are_resident_one_at_a_time_and_round_trip_exactly(tmp_path):
    store = ClientMemories(tmp_path)
    store.round = 1
    a = store.setdefault("a", {})
    a["w"] = torch.randn(5)
    a["history"] = [1.0, 2.0]
    want = a["w"].clone()
    b = store.setdefault("b", {})
    b["w"] = torch.ones(2)  # using b writes a and drops it from RAM
    assert a._data is None and (tmp_path / "a.r1.pt").is_file()
    assert torch.equal(a["w"], want) and a["history"] == [1.0, 2.0]  # loaded back on use, bit for bit
    assert b._data is None and (tmp_path / "b.r1.pt").is_file()
    store.round = 2
    _ = dict(b)  # read only: not rewritten
    files = store.flush()
    assert files == {"a": "a.r1.pt", "b": "b.r1.pt"} and not (tmp_path / "b.r2.pt").exists()
    a["w"] = torch.zeros(1)
    files = store.flush()
    assert files["a"] == "a.r2.pt"
    store.prune(files)
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["a.r2.pt", "b.r1.pt"]
    again = ClientMemories(tmp_path, files)
    assert torch.equal(again["a"]["w"], torch.zeros(1)) and torch.equal(again["b"]["w"], torch.ones(2))


def test_fedpav_keeps_trained_models_on_disk_and_the_checkpoint_reads_them(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=1)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False)
    engine.run()
    memories = engine.client_memory
    assert all(m._data is None for m in memories.values())  # nothing resident after the checkpoint
    files = load_checkpoint(tmp_path / "ckpt.pt", client_memory=False)["client_memory_files"]
    assert set(files) == {"synthA", "synthB"}
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert "client_memory_files" not in ckpt  # read inline: the loaded dict is self-contained
    for name, memory in ckpt["client_memory"].items():
        assert any(k.startswith("trained/") for k in memory)
        on_disk = memory_store.load_memory_file(tmp_path / memory_store.MEMORY_DIR / files[name])
        assert all(torch.equal(memory[k], on_disk[k]) for k in memory)


def test_setdefault_returns_the_stored_memory(tmp_path):
    store = ClientMemories(tmp_path)
    memory = store.setdefault("a", {})
    memory["x"] = torch.ones(1)  # a download writing into the memory it was given (DPPT) must not be lost
    assert store["a"] is memory and torch.equal(store["a"]["x"], torch.ones(1))


def test_a_memory_changed_in_place_after_loading_leaves_its_file_intact(tmp_path):
    """Files are mapped when loaded; the mapping is private, so the file an earlier checkpoint names never changes."""
    store = ClientMemories(tmp_path)
    store.round = 1
    store.setdefault("a", {})["w"] = torch.arange(4.0)
    first = store.flush()["a"]
    store.round = 2
    memory = store["a"]
    memory["w"].add_(10.0)  # a client update writing into the loaded tensor
    memory.mark_dirty()
    second = store.flush()["a"]
    assert (first, second) == ("a.r1.pt", "a.r2.pt")
    assert torch.equal(torch.load(tmp_path / first, weights_only=True)["w"], torch.arange(4.0))
    assert torch.equal(torch.load(tmp_path / second, weights_only=True)["w"], torch.arange(4.0) + 10)
    assert torch.equal(store["a"]["w"], torch.arange(4.0) + 10)


@pytest.mark.parametrize("dp", [{}, {"client_dp": True, "clip": 1e-3, "noise_multiplier": 1.0}],
                         ids=["fedpav", "client-dp"])
def test_trained_copies_equal_the_uploads_after_aggregation(tiny_synth, tmp_path, monkeypatch, dp):
    """FedPav's memory and its upload share one copy; the server (averaging, clipping, noise) never writes into it."""
    from privreid.federated.engine import FederatedEngine as Engine

    cfg = tiny_config(tiny_synth, rounds=1, **dp)
    sent = {}
    receive = Engine.receive

    def record(self, inbox, upload):
        sent[upload.client] = {k: v.clone() for k, v in upload.state.items()}
        receive(self, inbox, upload)

    monkeypatch.setattr(Engine, "receive", record)
    engine = Engine(cfg, federation(cfg), tmp_path, progress=False)
    engine.run()
    memories = load_checkpoint(tmp_path / "ckpt.pt")["client_memory"]
    assert set(sent) == {"synthA", "synthB"}
    for name, state in sent.items():
        trained = {k[len("trained/"):]: v for k, v in memories[name].items() if k.startswith("trained/")}
        assert trained.keys() == state.keys()
        assert all(torch.equal(trained[k], state[k]) for k in state)


def test_resumed_memories_equal_the_uninterrupted_run(tiny_synth, tmp_path, monkeypatch):
    """Each client's memory (FedPav's trained model) after ``--resume`` is bit-identical to an uninterrupted run's."""
    cfg = tiny_config(tiny_synth, rounds=2)
    fed = federation(cfg)
    FederatedEngine(cfg, fed, tmp_path / "full", progress=False).run()
    kill_in_round(monkeypatch, FederatedEngine(cfg, fed, tmp_path / "cut", progress=False), 2)
    FederatedEngine(cfg, fed, tmp_path / "cut", progress=False).run(resume=True)
    full = load_checkpoint(tmp_path / "full" / "ckpt.pt")["client_memory"]
    cut = load_checkpoint(tmp_path / "cut" / "ckpt.pt")["client_memory"]
    assert full.keys() == cut.keys() == {"synthA", "synthB"}
    for name in full:
        assert full[name].keys() == cut[name].keys() and full[name]
        assert all(torch.equal(full[name][k], cut[name][k]) for k in full[name])
