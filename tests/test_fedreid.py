"""FedReID (paper 002): Eq. 8 half-average, Eq. 10-13 server copy and regularisation, Eq. 9 aggregation, C = 0.5."""

import math

import pytest
import torch
import torch.nn.functional as F

from privreid.checkpoint import TRAINED_PREFIX, load_checkpoint, load_model
from privreid.data.catalog import build_federation
from privreid.federated.client import ClientContext
from privreid.federated.engine import FederatedEngine
from privreid.federated.methods.fedreid import FedReIDUpdate, half_average_start, server_logits, server_regularisation
from privreid.federated.policy import CLASSIFIER_LOCAL, clone_state
from privreid.federated.strategy import UniformAverage, Upload
from privreid.models import build_model

from conftest import spy_on_uploads, tiny_config
from privreid.composition import build_run


@pytest.fixture(scope="module")
def client(tiny_synth):
    return build_federation([str(tiny_synth)], test_domains=["synthC"]).clients[0]


def context(model, client, cfg, global_state, memory=None):
    return ClientContext(model=model, client=client, round=1, config=cfg, device=torch.device("cpu"),
                         global_state=global_state, seed=0, memory={} if memory is None else memory)


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
    assert UniformAverage().aggregate({}, ups).global_state["w"].item() == pytest.approx(1.5)


def test_client_start_is_the_half_average_of_received_and_own_trained_embedding(tiny_synth, client):
    cfg = tiny_config(tiny_synth, method="fedreid")
    model = build_model("resnet18", feat_dim=32, transforms=["mlp_head"], num_classes=client.num_classes)
    shared = CLASSIFIER_LOCAL.shared(model.state_dict())
    server = {k: (torch.full_like(v, 2.0) if torch.is_floating_point(v) else v) for k, v in shared.items()}
    head = clone_state({k: v for k, v in model.state_dict().items() if k.startswith("classifier.")})
    model.load_state_dict(server, strict=False)
    ctx = context(model, client, cfg, server)
    half_average_start(ctx)  # first participation: starts from theta^f
    assert all(torch.equal(model.state_dict()[k], v) for k, v in server.items())
    ctx.memory = {TRAINED_PREFIX + k: (torch.zeros_like(v) if torch.is_floating_point(v) else v)
                  for k, v in shared.items()}
    half_average_start(ctx)
    for name, p in model.named_parameters():
        if not name.startswith("classifier."):
            assert torch.equal(p, torch.ones_like(p)), name  # (2 + 0) / 2
    assert all(torch.equal(model.state_dict()[k], v) for k, v in head.items())  # omega^c untouched


def test_server_step_does_not_train_the_mapping_network(tiny_synth, client):
    model = build_model("resnet18", feat_dim=32, transforms=["mlp_head"], num_classes=client.num_classes).train()
    copy = {k: v.detach().clone().requires_grad_(v.is_floating_point() and "running" not in k)
            for k, v in CLASSIFIER_LOCAL.shared(model.state_dict()).items()}
    head_before = clone_state(model.classifier.state_dict())
    copy_bn_before = copy["neck.bn.running_mean"].clone()
    labels = torch.arange(4) % client.num_classes
    loss = F.cross_entropy(server_logits(model, copy, torch.rand(4, 3, 32, 16)), labels)
    loss.backward()
    assert all(p.grad is None for p in model.classifier.parameters())  # Eq. 10 on d' trains theta^f only
    assert all(torch.equal(v, head_before[k]) for k, v in model.classifier.state_dict().items())  # BN stats too
    assert copy["neck.fc.weight"].grad is not None and copy["neck.fc.weight"].grad.abs().sum() > 0
    assert not torch.equal(copy["neck.bn.running_mean"], copy_bn_before)  # the copy's own statistics move


def test_label_smoothing_reaches_the_server_copy_identity_loss(tiny_synth, client):
    for smoothing in (0.0, 0.3):
        cfg = tiny_config(tiny_synth, method="fedreid", label_smoothing=smoothing)
        torch.manual_seed(0)
        model = build_model("resnet18", feat_dim=32, transforms=["mlp_head"], num_classes=client.num_classes).eval()
        update = FedReIDUpdate(cfg)
        ctx = context(model, client, cfg, clone_state(CLASSIFIER_LOCAL.shared(model.state_dict())))
        update.server_copy = update.make_server_copy(ctx)
        ctx.images, labels = torch.rand(4, 3, 32, 16), torch.tensor([0, 1, 2, 3])
        server_id, _ = update.server_losses(ctx, model.forward_train(ctx.images)[2], labels)
        d_prime = server_logits(model, update.server_copy, ctx.images)
        expected = F.cross_entropy(d_prime, labels, label_smoothing=smoothing)
        assert server_id.item() == pytest.approx(expected.item(), rel=1e-6)
        assert server_id.item() != pytest.approx(F.cross_entropy(d_prime, labels, label_smoothing=0.15).item())


def test_teacher_starts_from_the_noise_free_theta_under_download_noise(tiny_synth, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_synth, method="fedreid", rounds=1, beta=0.5, beta_mode="download")
    engine = FederatedEngine(cfg, build_federation(cfg.data.roots, test_domains=["synthC"]), tmp_path,
                             progress=False, build=build_run)
    seen = []
    make_copy = FedReIDUpdate.make_server_copy

    def spy(ctx):
        copy = make_copy(ctx)
        seen.append((clone_state(copy), clone_state(CLASSIFIER_LOCAL.shared(ctx.model.state_dict()))))
        return copy

    monkeypatch.setattr(FedReIDUpdate, "make_server_copy", staticmethod(spy))
    received = clone_state(engine.global_state)
    engine.train_client(engine.clients[0], 0)
    (teacher, start), = seen
    assert teacher.keys() == received.keys() and all(torch.equal(teacher[k], received[k]) for k in received)
    # Eq. 15: the client's own start model is the noisy one (trainable parameters), the buffers are not
    assert (start["neck.fc.weight"] - received["neck.fc.weight"]).std().item() == pytest.approx(0.5, rel=0.05)
    assert torch.equal(start["neck.bn.running_var"], received["neck.bn.running_var"])


def test_fedreid_trains_end_to_end_and_scores_every_client(tiny_synth, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_synth, method="fedreid", rounds=2, seed=2, every=1)  # seed 2: one client per round
    uploads = spy_on_uploads(monkeypatch, UniformAverage)
    engine = FederatedEngine(cfg, build_federation(cfg.data.roots, test_domains=["synthC"]), tmp_path,
                             progress=False, build=build_run)
    assert all(len(engine.select_clients(r)) == 1 for r in range(5))  # C = 0.5 of 2 clients
    summary = engine.run()
    assert 0.0 <= summary["global_unseen"]["rank1"] <= 1.0
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    # the reference code's LeakyReLU(0.1) mapping network (FedReID's mapping_slope option)
    assert ckpt["model_config"]["transforms"] == [{"name": "mlp_head", "negative_slope": 0.1}]
    for round_no in (1, 2):  # every client, selected this round or not
        scored = {m["client"] for m in ckpt["metrics"] if m["scope"] == "local" and m["round"] == round_no}
        assert scored == {"synthA", "synthB"}
    trained = sorted(ckpt["client_states"])
    assert trained and all(set(ckpt["client_states"][c]) >= {"classifier.0.weight", "classifier.4.weight"}
                           for c in trained)
    assert not any(k.startswith("classifier.") for k in ckpt["global_state"])
    # the memory holds each client's embedding as its last local training left it: its last upload
    last = {u.client: u for ups in uploads for u in ups}
    for name in trained:
        memory = ckpt["client_memory"][name]
        assert all(torch.equal(memory[TRAINED_PREFIX + k], v) for k, v in last[name].state.items())
        personal = load_model(ckpt, client=name)  # its own embedding, not the server's
        assert isinstance(personal.classifier, torch.nn.Sequential)
        assert torch.equal(personal.state_dict()["neck.fc.weight"], last[name].state["neck.fc.weight"])
    # with one upload per round the global embedding is the last round's upload; a client that sat that
    # round out keeps its own, older embedding
    idle = [u.client for u in uploads[0] if u.client not in {v.client for v in uploads[1]}]
    assert idle and not torch.equal(load_model(ckpt, client=idle[0]).state_dict()["neck.fc.weight"],
                                    ckpt["global_state"]["neck.fc.weight"])


def test_recorded_local_metrics_reproduce_through_privreid_eval_client(tiny_synth, tmp_path):
    """Round 1 with C = 0.5: one client trained, the other not; both records reproduce with `eval --client`."""
    import json

    from typer.testing import CliRunner

    from privreid.cli import app

    cfg = tiny_config(tiny_synth, method="fedreid", rounds=1)
    FederatedEngine(cfg, build_federation(cfg.data.roots, test_domains=["synthC"]), tmp_path, progress=False, build=build_run).run()
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert len(ckpt["client_states"]) == 1  # the other client has not trained yet
    records = [m for m in ckpt["metrics"] if m["scope"] == "local"]
    assert sorted(m["client"] for m in records) == ["synthA", "synthB"]  # yet it is scored too
    for rec in records:
        out = tmp_path / f"{rec['client']}.json"
        res = CliRunner().invoke(app, ["eval", "--model", str(tmp_path / "ckpt.pt"), "--client", rec["client"],
                                       "--domains", rec["testset"], "--device", "cpu", "--json", str(out)])
        assert res.exit_code == 0, res.output
        (row,) = json.loads(out.read_text())
        assert {k: row[k] for k in ("rank1", "mAP", "mINP")} == {k: rec[k] for k in ("rank1", "mAP", "mINP")}
