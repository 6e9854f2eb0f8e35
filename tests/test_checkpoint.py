import dataclasses
import os
import pickle

import pytest
import torch

from privreid import __version__
from privreid.checkpoint import (TRAINED_PREFIX, Checkpoint, checkpoint_labels, load_checkpoint, load_model,
                                 personal_state, save_checkpoint)
from privreid.errors import CheckpointError
from privreid.models import build_model
from privreid.config import RunConfig


def minimal_ckpt(model, **extra):
    cfg = model.model_config()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    return {"method": "fedpav", "round": 1, "config": RunConfig().to_dict(), "model_config": cfg, "global_state": state,
            "client_states": {"a": {"classifier.weight": torch.randn(5, cfg["feat_dim"])}},
            "client_classes": {"a": 5}, **extra}


def test_round_trip_and_model_rebuild(tmp_path):
    model = build_model("resnet18", feat_dim=16).eval()
    path = save_checkpoint(minimal_ckpt(model), tmp_path / "ckpt.pt")
    ckpt = load_checkpoint(path)
    assert ckpt["round"] == 1 and ckpt["privreid_version"]
    x = torch.randn(2, 3, 32, 16)
    rebuilt = load_model(path)
    assert torch.allclose(rebuilt(x), model(x), atol=1e-6)
    personal = load_model(path, client="a")
    assert personal.classifier.weight.shape == (5, 16)
    assert torch.equal(personal.classifier.weight, ckpt["client_states"]["a"]["classifier.weight"])
    with pytest.raises(CheckpointError, match="no client 'zz'"):
        load_model(path, client="zz")


def test_atomic_write_leaves_old_checkpoint_on_failure(tmp_path, monkeypatch):
    model = build_model("resnet18", feat_dim=16)
    path = save_checkpoint(minimal_ckpt(model), tmp_path / "ckpt.pt")

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(RuntimeError):
        save_checkpoint(minimal_ckpt(model, round=2), path)
    assert load_checkpoint(path)["round"] == 1
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temporary file left behind


def test_before_commit_runs_before_the_replace_and_its_failure_keeps_the_old_checkpoint(tmp_path):
    model = build_model("resnet18", feat_dim=16)
    path = save_checkpoint(minimal_ckpt(model), tmp_path / "ckpt.pt")
    seen = []

    def fail():
        seen.append(load_checkpoint(path)["round"])  # the new checkpoint is not in place yet
        raise OSError("memory file not written")

    with pytest.raises(OSError, match="memory file"):
        save_checkpoint(minimal_ckpt(model, round=2), path, before_commit=fail)
    assert seen == [1] and load_checkpoint(path)["round"] == 1 and os.listdir(tmp_path) == ["ckpt.pt"]
    save_checkpoint(minimal_ckpt(model, round=2), path, before_commit=lambda: seen.append("ok"))
    assert seen == [1, "ok"] and load_checkpoint(path)["round"] == 2


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_malicious_pickle_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": "privreid-ckpt-v1", "payload": Evil()}, path)
    with pytest.raises(CheckpointError, match="refusing to load"):
        load_checkpoint(path)


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", pickle.dumps({"a": 1})])
def test_unreadable_checkpoints(tmp_path, content):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


def test_foreign_and_incomplete_checkpoints(tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a privreid checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    torch.save({"format": "privreid-ckpt-v1", "method": "x"}, tmp_path / "partial.pt")
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(tmp_path / "partial.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_standalone_needs_a_client(tmp_path):
    model = build_model("resnet18", feat_dim=16)
    path = save_checkpoint(minimal_ckpt(model, has_global_model=False), tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match="no global model"):
        load_model(path)


def test_personal_state_is_global_then_trained_then_local_keys():
    one, two, three = torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)
    memory = {TRAINED_PREFIX + "b": two, TRAINED_PREFIX + "c": two, "prev_state": {"a": three}}
    state = personal_state({"a": one, "b": one, "c": one}, {"c": three, "d": three}, memory)
    assert state == {"a": one, "b": two, "c": three, "d": three}
    assert personal_state({"a": one}, {"d": three}, {}) == {"a": one, "d": three}  # no trained copy: after download


def test_client_models_from_memory_and_for_clients_not_trained_yet(tmp_path):
    model = build_model("resnet18", feat_dim=16).eval()
    ckpt = minimal_ckpt(model, client_classes={"a": 5, "b": 4})
    trained = {k: v + 1 if torch.is_floating_point(v) else v for k, v in ckpt["global_state"].items()}
    ckpt["client_memory"] = {"a": {TRAINED_PREFIX + k: v for k, v in trained.items()}}
    with pytest.raises(CheckpointError, match="no client 'b'"):  # a checkpoint without initial local state
        load_model(ckpt, client="b")
    path = save_checkpoint({**ckpt, "initial_local_state": {}}, tmp_path / "ckpt.pt")
    a = load_model(path, client="a")  # its trained model kept in memory, with its classifier
    assert torch.equal(a.state_dict()["neck.fc.weight"], trained["neck.fc.weight"]) and a.num_classes == 5
    b = load_model(path, client="b")  # not trained yet: the global model and the initial local keys
    x = torch.randn(2, 3, 32, 16)
    with torch.no_grad():
        assert b.num_classes == 0 and torch.equal(b(x), model(x))


# ----------------------------------------------------------------------------- the typed Checkpoint
def full_ckpt(model, **extra):
    """Every key the engine writes (``FederatedEngine._checkpoint``), with distinguishable values."""
    cfg = model.model_config()
    glob = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    return {**minimal_ckpt(model), "round": 3, "config": RunConfig().to_dict(),
            "server_state": {"centres": torch.ones(2)}, "has_global_model": True,
            "global_eval_extra": {"neck.bn.running_mean": torch.zeros(cfg["feat_dim"])},
            "server_client_state": {"a": {"members": ["a"]}}, "observer_state": {"privacy": {"x": 1}},
            "client_memory": {"a": {"step": torch.tensor(7)}}, "initial_local_state": {},
            "client_classes": {"a": 5, "b": 4}, "audit_holdout": {"a": [("img.jpg", 0, 1)]},
            "metrics": [{"round": 3, "scope": "train"}], "comm": [{"bytes_up": 10}], "rng": {"torch": 1},
            "global_state": glob, "a_future_key": 42, **extra}


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return torch.equal(a, b)


def test_checkpoint_round_trip_has_every_key_as_a_field(tmp_path):
    model = build_model("resnet18", feat_dim=16)
    saved = full_ckpt(model)
    path = save_checkpoint(saved, tmp_path / "ckpt.pt")
    ckpt = Checkpoint.load(path)
    assert ckpt.path == path and ckpt.privreid_version == __version__
    assert (ckpt.method, ckpt.round, ckpt.config, ckpt.model_config) == ("fedpav", 3, saved["config"],
                                                                          model.model_config())
    for key in ("global_state", "client_states", "server_state", "global_eval_extra", "client_memory",
                "initial_local_state"):
        assert same(getattr(ckpt, key), saved[key]), key
    for key in ("server_client_state", "observer_state", "client_classes", "metrics", "comm", "rng"):
        assert getattr(ckpt, key) == saved[key], key
    assert ckpt.audit_holdout == {"a": [("img.jpg", 0, 1)]} and ckpt.has_global_model is True
    assert ckpt.other == {"a_future_key": 42}  # a key this version does not name is kept, not dropped
    assert ckpt.client_memory_files is None
    assert ckpt.shared_keys == frozenset(saved["global_state"]) and "classifier.weight" not in ckpt.shared_keys
    assert ckpt.trained_clients == ["a"] and ckpt.clients == ["a", "b"]  # b: initial local state, not trained
    with pytest.raises(dataclasses.FrozenInstanceError):
        ckpt.round = 4


def test_a_checkpoint_without_the_optional_keys_loads_with_their_defaults(tmp_path):
    """A hand-made checkpoint that names only the required keys (no has_global_model, server_state ...)."""
    model = build_model("resnet18", feat_dim=16).eval()
    save_checkpoint({**minimal_ckpt(model), "metrics": [], "comm": []}, tmp_path / "ckpt.pt")
    ckpt = Checkpoint.load(tmp_path / "ckpt.pt")
    assert ckpt.has_global_model is True
    assert ckpt.server_state == {} and ckpt.global_eval_extra == {} and ckpt.server_client_state == {}
    assert ckpt.observer_state == {} and ckpt.initial_local_state is None and ckpt.audit_holdout == {}
    assert ckpt.client_memory == {} and ckpt.clients == ["a"] and ckpt.other == {}
    x = torch.randn(2, 3, 32, 16)
    with torch.no_grad():
        assert torch.equal(ckpt.load_model()(x), model(x))
    with pytest.raises(CheckpointError, match="no client 'b' in checkpoint; clients: a"):
        ckpt.load_model("b")


def test_load_model_of_a_client_is_its_personal_state(tmp_path):
    """Global keys, then the kept trained keys, then the local keys (classifier included): exactly those."""
    model = build_model("resnet18", feat_dim=16).eval()
    saved = minimal_ckpt(model, client_classes={"a": 5})
    bumped = {k: v + 1 if torch.is_floating_point(v) else v for k, v in saved["global_state"].items()}
    norm = [k for k in saved["global_state"] if k.startswith("neck.bn.")]
    saved["client_states"]["a"].update({k: bumped[k] + 1 for k in norm})  # local norms (FedBN-style)
    saved["client_memory"] = {"a": {TRAINED_PREFIX + k: bumped[k] for k in bumped}}
    ckpt = Checkpoint.from_dict(saved)
    want = personal_state(saved["global_state"], saved["client_states"]["a"], saved["client_memory"]["a"])
    got = ckpt.load_model("a").state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert all(torch.equal(got[k], bumped[k] + 1) for k in norm)  # the local keys win over the trained ones
    assert torch.equal(got["backbone.conv1.weight"], bumped["backbone.conv1.weight"])
    assert torch.equal(load_model(saved, client="a").state_dict()["neck.bn.weight"], got["neck.bn.weight"])


def test_shared_classifier_in_server_state_is_the_clients_head():
    """DPPT's global-label classifier (server-side) is the head of a client that keeps none of its own."""
    model = build_model("resnet18", feat_dim=16)
    head = torch.randn(9, 16)
    ckpt = Checkpoint.from_dict(minimal_ckpt(model, client_states={"a": {}}, server_state={"classifier.weight": head,
                                                                                           "centres": torch.ones(1)}))
    net = ckpt.load_model("a")
    assert net.num_classes == 9 and torch.equal(net.classifier.weight, head)
    assert ckpt.load_model().classifier is None


def test_standalone_checkpoint_has_no_global_model_and_names_its_clients():
    model = build_model("resnet18", feat_dim=16)
    local = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    ckpt = Checkpoint.from_dict(minimal_ckpt(model, has_global_model=False, global_state={},
                                             client_states={"a": local, "b": local}))
    assert ckpt.has_global_model is False and ckpt.shared_keys == frozenset() and ckpt.clients == ["a", "b"]
    with pytest.raises(CheckpointError, match=r"^method 'fedpav' has no global model; pick a client with --client "
                                              r"\(a, b\)$"):
        ckpt.load_model()
    assert torch.equal(ckpt.load_model("b").state_dict()["neck.fc.weight"], local["neck.fc.weight"])


def test_checkpoint_load_errors_are_one_line(tmp_path):
    whole = save_checkpoint(minimal_ckpt(build_model("resnet18", feat_dim=16)), tmp_path / "whole.pt").read_bytes()
    (tmp_path / "bad.pt").write_bytes(whole[:len(whole) // 2])  # truncated
    torch.save({"state_dict": {}}, tmp_path / "foreign.pt")
    torch.save({"format": "privreid-ckpt-v1", "method": "x"}, tmp_path / "partial.pt")
    for name, message in [("missing.pt", "checkpoint not found"), ("bad.pt", "is a torch file cut short"),
                          ("foreign.pt", "is not a privreid checkpoint"), ("partial.pt", "is incomplete: missing")]:
        with pytest.raises(CheckpointError, match=message) as info:
            Checkpoint.load(tmp_path / name)
        assert "\n" not in str(info.value) and str(tmp_path / name) in str(info.value)
    for cut in (1000, len(whole) // 3, len(whole) - 1):  # wherever it is cut, whatever the weights' bytes hold
        (tmp_path / "cut.pt").write_bytes(whole[:cut])
        with pytest.raises(CheckpointError, match="is a torch file cut short"):
            Checkpoint.load(tmp_path / "cut.pt")
    with pytest.raises(CheckpointError, match="incomplete: missing method"):
        Checkpoint.from_dict({k: v for k, v in minimal_ckpt(build_model("resnet18", feat_dim=16)).items()
                              if k != "method"})


def test_client_memory_files_are_read_or_left_for_the_engine(tmp_path):
    from privreid.checkpoint import file_sha256
    from privreid.rundir import MEMORY_DIR

    model = build_model("resnet18", feat_dim=16)
    (tmp_path / MEMORY_DIR).mkdir()
    torch.save({"prev": torch.arange(3)}, tmp_path / MEMORY_DIR / "a.r1.pt")
    save_checkpoint(minimal_ckpt(model, client_memory_files={"a": "a.r1.pt", "b": None},
                                 client_memory_hashes={"a": file_sha256(tmp_path / MEMORY_DIR / "a.r1.pt")}),
                    tmp_path / "ckpt.pt")
    lazy = Checkpoint.load(tmp_path / "ckpt.pt", client_memory=False)
    assert lazy.client_memory_files == {"a": "a.r1.pt", "b": None} and lazy.client_memory == {}
    read = Checkpoint.load(tmp_path / "ckpt.pt")
    assert read.client_memory_files is None and read.client_memory["b"] == {}
    assert torch.equal(read.client_memory["a"]["prev"], torch.arange(3))


def test_checkpoint_labels_are_unique(tmp_path):
    model = build_model("resnet18", feat_dim=16)
    paths = [save_checkpoint(minimal_ckpt(model), tmp_path / d / "ckpt.pt") for d in ("run", "run2")]
    ckpts = [Checkpoint.load(p) for p in (paths[0], paths[1], paths[0])]
    assert checkpoint_labels(ckpts) == ["fedpav (run)", "fedpav (run2)", "fedpav (run) #2"]


@pytest.mark.parametrize("transforms", [(), ("mlp_head",)], ids=["linear", "mlp"])
def test_the_classifier_prefix_names_exactly_the_heads_keys(transforms):
    from privreid.federated.policy import CLASSIFIER_LOCAL
    from privreid.models.reid_net import CLASSIFIER_PREFIX, is_classifier_key

    model = build_model("resnet18", feat_dim=16, num_classes=5, transforms=transforms)
    keys = model.state_dict().keys()
    head_keys = {CLASSIFIER_PREFIX + k for k in model.classifier.state_dict()}
    assert head_keys and {k for k in keys if is_classifier_key(k)} == head_keys
    assert set(CLASSIFIER_LOCAL.local(model.state_dict())) == head_keys
