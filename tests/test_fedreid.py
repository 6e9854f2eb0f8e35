"""FedReID (paper 002): Eq. 8 half-average, Eq. 11-13 server regularisation, Eq. 9 aggregation, C = 0.5."""

import math

import pytest
import torch

from privreid.checkpoint import load_checkpoint, load_model
from privreid.data.catalog import build_federation
from privreid.federated.client import ClientContext
from privreid.federated.engine import FederatedEngine
from privreid.federated.methods.fedreid import MEMORY_KEY, FedReIDUpdate, server_regularisation
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.federated.strategy import UniformAverage, Upload
from privreid.models import build_model

from conftest import tiny_config


def test_server_regularisation_matches_hand_computation():
    client = torch.tensor([[1.0, 0.0, -1.0]])
    server = torch.tensor([[0.0, 2.0, 0.0]])
    T, gamma = 3.0, 9.0
    p = [math.exp(v / T) for v in (1.0, 0.0, -1.0)]
    q = [math.exp(v / T) for v in (0.0, 2.0, 0.0)]
    p = [v / sum(p) for v in p]
    q = [v / sum(q) for v in q]
    expected = gamma * sum(qi * math.log(qi / pi) for qi, pi in zip(q, p))
    assert server_regularisation(client, server, T, gamma).item() == pytest.approx(expected, rel=1e-5)
    assert server_regularisation(server, server, T, gamma).item() == pytest.approx(0.0, abs=1e-6)


def test_uniform_average_is_eq9():
    ups = [Upload("a", {"w": torch.tensor([0.0])}, 10), Upload("b", {"w": torch.tensor([3.0])}, 990)]
    assert UniformAverage().aggregate({}, ups)["w"].item() == pytest.approx(1.5)


def test_client_starts_from_half_average_and_remembers_its_embedding(tiny_synth):
    cfg = tiny_config(tiny_synth, method="fedreid", lr_backbone=0.0, lr_head=0.0, momentum=0.0, weight_decay=0.0)
    client = build_federation(cfg.data.roots, test_domains=["synthC"]).clients[0]
    model = build_model("resnet18", feat_dim=32, head="mlp", num_classes=client.num_classes)
    shared = CLASSIFIER_LOCAL.shared(model.state_dict())
    server = {k: (torch.full_like(v, 2.0) if torch.is_floating_point(v) else v) for k, v in shared.items()}
    previous = {MEMORY_KEY + k: (torch.zeros_like(v) if torch.is_floating_point(v) else v) for k, v in shared.items()}
    model.load_state_dict(server, strict=False)
    memory = dict(previous)
    ctx = ClientContext(model=model, client=client, round=1, config=cfg, device=torch.device("cpu"),
                        global_state=server, seed=0, memory=memory)
    FedReIDUpdate(cfg)(ctx)
    for name, p in model.named_parameters():
        if not name.startswith("classifier.") and p.requires_grad:
            assert torch.allclose(p, torch.ones_like(p)), name  # (2 + 0) / 2 with lr = 0
    assert torch.equal(memory[MEMORY_KEY + "neck.fc.weight"], model.state_dict()["neck.fc.weight"])


def test_fedreid_trains_end_to_end(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, method="fedreid", rounds=2)
    engine = FederatedEngine(cfg, build_federation(cfg.data.roots, test_domains=["synthC"]), tmp_path,
                             progress=False)
    assert all(len(engine.select_clients(r)) == 1 for r in range(5))  # C = 0.5 of 2 clients
    summary = engine.run()
    assert 0.0 <= summary["global_unseen"]["rank1"] <= 1.0
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt["model_config"]["head"] == "mlp"
    trained = [c for c in ckpt["client_states"]]
    assert trained and all(set(ckpt["client_states"][c]) >= {"classifier.0.weight", "classifier.4.weight"}
                           for c in trained)
    assert not any(k.startswith("classifier.") for k in ckpt["global_state"])
    assert all(any(k.startswith(MEMORY_KEY) for k in ckpt["client_memory"][c]) for c in trained)
    personal = load_model(ckpt, client=trained[0])
    assert isinstance(personal.classifier, torch.nn.Sequential)
