"""Client memories on disk (issue 14, part 1): loaded one at a time, written when changed, exact round trip."""

import pickle

import pytest
import torch

from privreid.checkpoint import load_checkpoint, load_memory_file
from privreid.federated import memory_store
from privreid.federated.engine import FederatedEngine
from privreid.federated.memory_store import ClientMemories
from privreid.rundir import MEMORY_DIR

from test_engine import federation
from conftest import kill_in_round, tiny_config
from privreid.composition import build_run


def test_memories_are_resident_one_at_a_time_and_round_trip_exactly(tmp_path):
    store = ClientMemories(tmp_path)
    store.round = 1
    a = store.setdefault("a", {})
    a["w"] = torch.randn(5)
    a["history"] = [1.0, 2.0]
    want = a["w"].clone()
    b = store.setdefault("b", {})
    b["w"] = torch.ones(2)  # using b writes a and drops it from RAM
    store.wait()  # the write runs on the writer thread
    assert a._data is None and (tmp_path / "a.r1.pt").is_file()
    assert torch.equal(a["w"], want) and a["history"] == [1.0, 2.0]  # loaded back on use, bit for bit
    store.wait()
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
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    engine.run()
    memories = engine.client_memory
    assert all(m._data is None for m in memories.values())  # nothing resident after the checkpoint
    files = load_checkpoint(tmp_path / "ckpt.pt", client_memory=False)["client_memory_files"]
    assert set(files) == {"synthA", "synthB"}
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert "client_memory_files" not in ckpt  # read inline: the loaded dict is self-contained
    for name, memory in ckpt["client_memory"].items():
        assert any(k.startswith("trained/") for k in memory)
        on_disk = load_memory_file(tmp_path / MEMORY_DIR / files[name])
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
    engine = Engine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
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
    FederatedEngine(cfg, fed, tmp_path / "full", progress=False, build=build_run).run()
    kill_in_round(monkeypatch, FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run), 2)
    FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run).run(resume=True)
    full = load_checkpoint(tmp_path / "full" / "ckpt.pt")["client_memory"]
    cut = load_checkpoint(tmp_path / "cut" / "ckpt.pt")["client_memory"]
    assert full.keys() == cut.keys() == {"synthA", "synthB"}
    for name in full:
        assert full[name].keys() == cut[name].keys() and full[name]
        assert all(torch.equal(full[name][k], cut[name][k]) for k in full[name])


def test_a_failed_background_write_keeps_the_previous_checkpoint_and_its_files(tiny_synth, tmp_path, monkeypatch):
    """The memory files are written on another thread: a write that fails in round 2 stops the run before the
    round's checkpoint replaces round 1's, whose files stay, and ``--resume`` then gives the uninterrupted run."""
    cfg = tiny_config(tiny_synth, rounds=2)
    fed = federation(cfg)
    real = memory_store.save_memory_file

    def full_disk(data, directory, file):
        if ".r2." in file:
            raise OSError("No space left on device")
        real(data, directory, file)

    monkeypatch.setattr(memory_store, "save_memory_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run).run()
    ckpt = load_checkpoint(tmp_path / "cut" / "ckpt.pt", client_memory=False)
    assert ckpt["round"] == 1 and all(".r1." in f for f in ckpt["client_memory_files"].values())
    monkeypatch.setattr(memory_store, "save_memory_file", real)
    FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run).run(resume=True)
    FederatedEngine(cfg, fed, tmp_path / "full", progress=False, build=build_run).run()
    full = load_checkpoint(tmp_path / "full" / "ckpt.pt")
    cut = load_checkpoint(tmp_path / "cut" / "ckpt.pt")
    assert all(torch.equal(full["global_state"][k], cut["global_state"][k]) for k in full["global_state"])


def _counting_loads(monkeypatch) -> list:
    """Record every memory file :func:`memory_store.load_memory_file` reads."""
    loads = []
    load = memory_store.load_memory_file

    def counting(path):
        loads.append(path.name)
        return load(path)

    monkeypatch.setattr(memory_store, "load_memory_file", counting)
    return loads


def test_prune_deletes_only_the_memory_files_privreid_wrote(tmp_path):
    """A file of another name in client_memory/ (the user's) survives the pruning after a checkpoint (issue 39)."""
    store = ClientMemories(tmp_path)
    store.round = 1
    store.setdefault("a", {})["w"] = torch.ones(2)
    (tmp_path / "notes.pt").write_bytes(b"mine")
    old = store.flush()
    store.round = 2
    store["a"]["w"] = torch.zeros(2)
    store.prune(store.flush())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.r2.pt", "notes.pt"] and old == {"a": "a.r1.pt"}


def test_replacing_every_entry_of_a_memory_never_reads_its_file(tmp_path, monkeypatch):
    """FedPav replaces its whole trained copy every round: the old file is not read only to be overwritten."""
    store = ClientMemories(tmp_path)
    store.round = 1
    store.setdefault("a", {}).update({"w": torch.arange(3.0), "b": torch.ones(2)})
    store.flush()
    loads = _counting_loads(monkeypatch)
    store.round = 2
    store["a"].update({"b": torch.zeros(2), "w": torch.full((3,), -0.0)})  # other order than the file's
    store.setdefault("z", {})["x"] = torch.ones(1)  # using another memory writes a
    files = store.flush()
    assert loads == [] and files["a"] == "a.r2.pt"
    written = load_memory_file(tmp_path / "a.r2.pt")
    assert list(written) == ["w", "b"]  # the file's order, as setting the entries over the loaded file gives
    assert torch.equal(written["b"], torch.zeros(2)) and torch.equal(written["w"].signbit(), torch.ones(3, dtype=bool))


def test_entries_set_over_an_unread_file_keep_the_files_other_entries(tmp_path, monkeypatch):
    store = ClientMemories(tmp_path)
    store.round = 1
    store.setdefault("a", {}).update({"w": torch.arange(3.0), "keep": [1, 2]})
    store.flush()
    loads = _counting_loads(monkeypatch)
    store.round = 2
    memory = store["a"]
    memory["w"] = torch.zeros(3)
    memory["new"] = torch.ones(1)
    assert loads == []  # setting reads nothing
    assert memory["keep"] == [1, 2] and torch.equal(memory["w"], torch.zeros(3))  # a read loads the file under them
    assert loads == ["a.r1.pt"] and list(memory) == ["w", "keep", "new"]
    store.flush()
    again = ClientMemories(tmp_path, {"a": "a.r2.pt"})["a"].to_dict()
    assert list(again) == ["w", "keep", "new"] and again["keep"] == [1, 2] and torch.equal(again["w"], torch.zeros(3))


def test_a_partial_update_of_an_unread_memory_is_merged_when_written(tmp_path, monkeypatch):
    """Written without being read: the entries the update did not replace come from the file, not lost."""
    store = ClientMemories(tmp_path, {})
    store.round = 1
    store.setdefault("a", {}).update({"w": torch.arange(3.0), "keep": torch.ones(2)})
    store.flush()
    resumed = ClientMemories(tmp_path, {"a": "a.r1.pt"})  # a resumed run: the file's keys are not known yet
    resumed.round = 2
    resumed["a"]["w"] = torch.zeros(3)
    files = resumed.flush()
    written = load_memory_file(tmp_path / files["a"])
    assert list(written) == ["w", "keep"] and torch.equal(written["keep"], torch.ones(2))
    assert torch.equal(written["w"], torch.zeros(3))


def test_a_memory_is_written_in_the_background_and_reading_it_waits_for_its_write(tmp_path, monkeypatch):
    """The write runs on the writer thread while the caller goes on; loading that memory waits until it is on disk."""
    import threading

    release, started = threading.Event(), threading.Event()
    real = memory_store.save_memory_file

    def held(data, directory, file):
        started.set()
        assert release.wait(10)
        real(data, directory, file)

    monkeypatch.setattr(memory_store, "save_memory_file", held)
    store = ClientMemories(tmp_path)
    store.round = 1
    store.setdefault("a", {})["w"] = torch.arange(4.0)
    store.setdefault("b", {})  # using b starts a's write and drops a from RAM
    assert started.wait(10) and not (tmp_path / "a.r1.pt").exists()  # the caller was not held
    threading.Timer(0.2, release.set).start()
    assert torch.equal(store["a"]["w"], torch.arange(4.0))  # FileNotFoundError if the read did not wait
    assert (tmp_path / "a.r1.pt").exists()


def test_one_write_is_in_flight_at_a_time_and_a_failed_write_surfaces_at_flush(tmp_path, monkeypatch):
    import threading

    real, active, most = memory_store.save_memory_file, [0], [0]
    lock = threading.Lock()

    def counted(data, directory, file):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            real(data, directory, file)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(memory_store, "save_memory_file", counted)
    store = ClientMemories(tmp_path)
    store.round = 1
    for name in "abcdef":
        store.setdefault(name, {})["w"] = torch.full((50_000,), float(ord(name)))
    files = store.flush()
    assert most[0] == 1 and sorted(p.name for p in tmp_path.iterdir()) == sorted(files.values())
    monkeypatch.setattr(memory_store, "save_memory_file", real)
    store.round = 2
    store["a"]["f"] = lambda: 0  # not picklable: the background write fails
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        store.flush()
    # the failed write left no file behind, and round 1's files are intact
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files.values())
    assert torch.equal(load_memory_file(tmp_path / files["a"])["w"], torch.full((50_000,), 97.0))
def test_a_fedpav_round_reads_no_memory_file_while_training(tiny_synth, tmp_path, monkeypatch):
    """Round 2 replaces each client's trained copy without reading round 1's (evaluation, after training, reads)."""
    from privreid.federated.engine import FederatedEngine as Engine

    cfg = tiny_config(tiny_synth, rounds=2)
    loads = _counting_loads(monkeypatch)
    during_training = []
    collect = Engine.collect_uploads

    def training(self, round_index, selected, inbox):
        start = len(loads)
        collect(self, round_index, selected, inbox)
        during_training.append(loads[start:])

    monkeypatch.setattr(Engine, "collect_uploads", training)
    Engine(cfg, federation(cfg), tmp_path, progress=False, build=build_run).run()
    assert during_training == [[], []]
    assert loads  # the evaluation of round 2 reads the personalised models
