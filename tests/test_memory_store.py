"""Client memories on disk (issue 14, part 1): loaded one at a time, written when changed, exact round trip."""

import torch

from privreid.checkpoint import load_checkpoint
from privreid.federated import memory_store
from privreid.federated.engine import FederatedEngine
from privreid.federated.memory_store import ClientMemories

from test_engine import federation
from conftest import tiny_config


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
