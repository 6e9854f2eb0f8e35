import os
import pickle

import pytest
import torch

from privreid.checkpoint import TRAINED_PREFIX, load_checkpoint, load_model, personal_state, save_checkpoint
from privreid.errors import CheckpointError
from privreid.models import build_model


def minimal_ckpt(model, **extra):
    cfg = model.model_config()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    return {"method": "fedpav", "round": 1, "config": {}, "model_config": cfg, "global_state": state,
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
