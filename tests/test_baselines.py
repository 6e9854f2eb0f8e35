"""The conventional FL baselines with decoupled classifiers: FedAvg+D, FedProx+D, FedBN+D, MOON+D."""

import copy
import math

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint, load_model
from privreid.cli import app
from privreid.data.catalog import build_federation
from privreid.errors import ConfigError
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.engine import FederatedEngine
from privreid.federated.methods import fedbn, fedprox, moon
from privreid.federated.policy import CLASSIFIER_LOCAL, clone_state, state_nbytes
from privreid.federated.registry import get_method
from privreid.models import NORM_TYPES, build_model
from privreid.seeding import seed_everything

from conftest import tiny_config
from privreid.composition import build_run

BASELINES = ("fedavg", "fedprox", "fedbn", "moon")


@pytest.fixture(scope="module")
def fed(tiny_synth):
    cfg = tiny_config(tiny_synth)
    return build_federation(cfg.data.roots, test_domains=cfg.data.test_domains)


def direct_config(root, **train):
    """Three plain SGD steps (no momentum / weight decay) for direct client-update calls."""
    return tiny_config(root, max_steps_per_epoch=3, momentum=0.0, weight_decay=0.0, **train)


def fresh_model(num_classes):
    seed_everything(0)
    return build_model("resnet18", num_classes=num_classes, feat_dim=16)


def run_update(update, model, client, cfg, *, memory=None, round_index=0, global_state=None):
    """One client update on ``model`` (in place) from a fixed seed; returns (metrics, ctx)."""
    if global_state is None:
        global_state = clone_state(CLASSIFIER_LOCAL.shared(model.state_dict()))
    ctx = ClientContext(model=model, client=client, round=round_index, config=cfg, device=torch.device("cpu"),
                        global_state=global_state, seed=123, memory={} if memory is None else memory)
    seed_everything(123)
    return update(ctx), ctx


def shared_distance(model, state):
    return math.sqrt(sum(float((p.detach() - state[n]).pow(2).sum()) for n, p in model.named_parameters()
                         if n in state))


def norm_keys_by_inspection(model):
    keys = set()
    for name, module in model.named_modules():
        if isinstance(module, NORM_TYPES):
            keys |= {f"{name}.{k}" for k in module.state_dict()}
    return keys


# --------------------------------------------------------------------------- registry / CLI
def test_cli_lists_the_baselines_with_their_options():
    res = CliRunner().invoke(app, ["methods"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    for name in BASELINES:
        assert any(line.startswith(name + " ") for line in lines), name
    assert "options: mu=0.01" in res.output  # fedprox
    assert "options: mu=1.0, tau=0.5" in res.output  # moon


def test_option_validation(tiny_synth):
    with pytest.raises(ConfigError, match="mu must be a number"):
        fedprox.make_client_update(tiny_config(tiny_synth, method="fedprox", method_options={"mu": -1}))
    with pytest.raises(ConfigError, match="tau must be a number > 0"):
        moon.make_client_update(tiny_config(tiny_synth, method="moon", method_options={"tau": 0}))
    with pytest.raises(ConfigError, match="has no option"):
        get_method("fedbn").check_options(tiny_config(tiny_synth, method="fedbn", method_options={"mu": 1}))
    assert fedprox.make_client_update(tiny_config(tiny_synth, method_options={"mu": 0.5})).mu == 0.5


# --------------------------------------------------------------------------- FedAvg+D
def test_fedavg_is_bit_identical_to_fedpav(tiny_synth, fed, tmp_path):
    states = {}
    for name in ("fedavg", "fedpav"):
        cfg = tiny_config(tiny_synth, method=name, rounds=1, every=100)
        FederatedEngine(cfg, fed, tmp_path / name, progress=False, build=build_run).run()
        states[name] = load_checkpoint(tmp_path / name / "ckpt.pt")["global_state"]
    a, b = states["fedavg"], states["fedpav"]
    model = load_model(tmp_path / "fedavg" / "ckpt.pt")  # the checkpoint gives the global model
    assert all(torch.equal(model.state_dict()[k], v) for k, v in a.items())
    assert a.keys() == b.keys() and "neck.bn.running_var" in a  # BN statistics are aggregated too
    assert all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- FedBN+D
def test_fedbn_policy_split_on_a_real_resnet18():
    model = build_model("resnet18", num_classes=5, feat_dim=16)
    state = model.state_dict()
    local, shared = fedbn.FEDBN_POLICY.local(state), fedbn.FEDBN_POLICY.shared(state)
    # by hand: stem bn1, 8 blocks x (bn1, bn2), 3 shortcut norms (layer2-4 .0.downsample.1), neck.bn
    layers = ["backbone.bn1", "neck.bn"]
    layers += [f"backbone.layer{i}.{j}.bn{k}" for i in range(1, 5) for j in range(2) for k in (1, 2)]
    layers += [f"backbone.layer{i}.0.downsample.1" for i in (2, 3, 4)]
    suffixes = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    expected = {f"{layer}.{s}" for layer in layers for s in suffixes} | {"classifier.weight"}
    assert len(layers) == 21 and set(local) == expected
    assert set(local) == norm_keys_by_inspection(model) | {"classifier.weight"}
    assert {"backbone.conv1.weight", "backbone.layer2.0.downsample.0.weight", "neck.fc.weight", "neck.fc.bias"} \
        <= set(shared)
    assert not any(fedbn.is_norm_key(k) for k in shared)
    assert set(local) | set(shared) == set(state)


@pytest.mark.parametrize("arch,neck", [("resnet50", "linear"), ("resnet18", "bnneck")])
def test_fedbn_norm_rule_matches_module_inspection(arch, neck):
    model = build_model(arch, num_classes=3, neck=neck, feat_dim=16)
    assert {k for k in model.state_dict() if fedbn.is_norm_key(k)} == norm_keys_by_inspection(model)


def test_fedbn_global_eval_state_by_hand():
    shared = {"neck.fc.weight": torch.tensor([[1.0, 2.0]])}
    clients = {
        "b": {"classifier.weight": torch.zeros(4, 2), "neck.bn.weight": torch.tensor([3.0, 4.0]),
              "neck.bn.running_var": torch.tensor([3.0, 5.0]), "neck.bn.num_batches_tracked": torch.tensor(7)},
        "a": {"classifier.weight": torch.ones(3, 2), "neck.bn.weight": torch.tensor([1.0, 2.0]),
              "neck.bn.running_var": torch.tensor([1.0, 1.0]), "neck.bn.num_batches_tracked": torch.tensor(5)},
    }
    out = fedbn.global_eval_state(shared, clients)
    assert set(out) == {"neck.fc.weight", "neck.bn.weight", "neck.bn.running_var", "neck.bn.num_batches_tracked"}
    assert torch.equal(out["neck.fc.weight"], shared["neck.fc.weight"])
    assert torch.allclose(out["neck.bn.weight"], torch.tensor([2.0, 3.0]))  # (1+3)/2, (2+4)/2
    assert torch.allclose(out["neck.bn.running_var"], torch.tensor([2.0, 3.0]))  # (1+3)/2, (1+5)/2
    assert out["neck.bn.num_batches_tracked"].item() == 7 and out["neck.bn.weight"].dtype == torch.float32
    assert set(clients["a"]) == {"classifier.weight", "neck.bn.weight", "neck.bn.running_var",
                                 "neck.bn.num_batches_tracked"}  # inputs untouched
    with pytest.raises(ValueError, match="before any client"):
        fedbn.global_eval_state(shared, {})


class UploadSpy:
    """Wraps an engine's strategy and records every upload the server receives (one list per round)."""

    def __init__(self, inner):
        self.inner, self.uploads = inner, []

    def configure(self, *args):
        return self.inner.configure(*args)

    def with_server_state(self, server_state):
        self.inner = self.inner.with_server_state(server_state)
        return self

    def accumulator(self, global_state):
        inner, received = self.inner.accumulator(global_state), []
        self.uploads.append(received)

        class Spy:
            def add(self, upload):
                received.append(upload)
                inner.add(upload)

            def result(self):
                return inner.result()

        return Spy()


@pytest.fixture(scope="module")
def fedbn_run(tiny_synth, fed, tmp_path_factory):
    out = tmp_path_factory.mktemp("fedbn")
    engine = FederatedEngine(tiny_config(tiny_synth, method="fedbn", rounds=2), fed, out, progress=False, build=build_run)
    spy = engine.strategy = UploadSpy(engine.strategy)
    summary = engine.run()
    return engine, spy, summary, load_checkpoint(out / "ckpt.pt")


def test_fedbn_never_uploads_norm_layers(fedbn_run):
    engine, spy, summary, ckpt = fedbn_run
    assert len(spy.uploads) == 2 and all(len(u) == 2 for u in spy.uploads)
    model_keys = set(engine.model.state_dict())
    for uploads in spy.uploads:
        for up in uploads:
            assert up.state and not any(
                ".bn" in k or "downsample.1." in k or "running_" in k or "num_batches_tracked" in k
                or k.startswith("classifier.") for k in up.state)
            assert set(up.state) == set(fedbn.FEDBN_POLICY.shared({k: 0 for k in model_keys}))
    assert not any(fedbn.is_norm_key(k) for k in ckpt["global_state"])
    per_model = state_nbytes(fedbn.FEDBN_POLICY.shared(engine.model.state_dict()))
    assert summary["comm_bytes_up"] == summary["comm_bytes_down"] == 2 * 2 * per_model
    # each client keeps its own BN, trained on its own data
    a, b = ckpt["client_states"]["synthA"], ckpt["client_states"]["synthB"]
    assert set(a) == set(b) == set(fedbn.FEDBN_POLICY.local(engine.model.state_dict()))
    assert not torch.equal(a["backbone.bn1.running_mean"], b["backbone.bn1.running_mean"])
    assert "global_unseen" in summary


def test_fedbn_checkpoint_gives_personal_and_global_eval_models(fedbn_run):
    _, _, _, ckpt = fedbn_run
    personal = load_model(ckpt, client="synthA")
    for k, v in ckpt["client_states"]["synthA"].items():
        if fedbn.is_norm_key(k):
            assert torch.equal(personal.state_dict()[k], v)
    # the global eval model: aggregated shared layers + mean of the clients' norm layers
    expected = fedbn.global_eval_state(ckpt["global_state"], ckpt["client_states"])
    glob = load_model({**ckpt, "global_state": expected})
    mean = (ckpt["client_states"]["synthA"]["neck.bn.running_mean"]
            + ckpt["client_states"]["synthB"]["neck.bn.running_mean"]) / 2
    assert torch.allclose(glob.state_dict()["neck.bn.running_mean"], mean)
    assert torch.equal(glob.state_dict()["neck.fc.weight"], ckpt["global_state"]["neck.fc.weight"])
    with torch.no_grad():
        assert glob(torch.rand(2, 3, 32, 16)).shape == (2, 32)


def test_fedbn_load_model_gives_the_global_eval_model(fedbn_run):
    _, _, _, ckpt = fedbn_run
    model = load_model(ckpt)
    expected = fedbn.global_eval_state(ckpt["global_state"], ckpt["client_states"])
    assert all(torch.equal(model.state_dict()[k], v) for k, v in expected.items())


# --------------------------------------------------------------------------- FedProx+D
def test_proximal_term_by_hand_on_a_toy_model():
    toy = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    received = {k: v.clone() for k, v in toy.state_dict().items() if k.startswith("0.")}  # "1." is local
    with torch.no_grad():
        toy[0].weight.add_(torch.tensor([[0.5, -1.0, 0.0], [2.0, 0.0, 0.25]]))
        toy[0].bias.add_(torch.tensor([1.0, -3.0]))
        toy[1].weight.add_(10.0)  # a local parameter: no proximal term
    update = fedprox.ProximalUpdate(tiny_config("."), mu=0.2)
    ctx = ClientContext(model=toy, client=None, round=0, config=None, device=torch.device("cpu"),
                        global_state=received, seed=0)
    update._params, update._anchors = update.anchor(ctx)
    assert len(update._params) == 2
    term = update.extra_loss(ctx, None, None, None, None)
    by_hand = 0.2 / 2 * (0.5 ** 2 + 1.0 ** 2 + 2.0 ** 2 + 0.25 ** 2 + 1.0 ** 2 + 3.0 ** 2)
    assert term.item() == pytest.approx(by_hand, rel=1e-6)
    term.backward()  # gradient mu * (w - w^t) on the shared weights only
    assert torch.allclose(toy[0].bias.grad, 0.2 * torch.tensor([1.0, -3.0]))
    assert toy[1].weight.grad is None
    assert fedprox.proximal_term([], [], 0.2).item() == 0.0


def test_proximal_anchor_is_the_received_shared_parameters_only():
    model = build_model("resnet18", num_classes=4, feat_dim=16)
    received = clone_state(CLASSIFIER_LOCAL.shared(model.state_dict()))
    names = [n for n, _ in fedprox.shared_parameters(model, received)]
    assert "classifier.weight" not in names and "neck.fc.weight" in names
    assert set(names) == {n for n, p in model.named_parameters() if not n.startswith("classifier.")}
    assert not any("running" in n for n in names)  # buffers are not in the term


def test_fedprox_large_mu_keeps_shared_weights_closer(tiny_synth, fed):
    client = fed.clients[0]
    start = fresh_model(client.num_classes)
    received = clone_state(CLASSIFIER_LOCAL.shared(start.state_dict()))

    def train(update_cls, steps, **kw):
        cfg = tiny_config(tiny_synth, momentum=0.0, weight_decay=0.0, max_steps_per_epoch=steps[0],
                          local_epochs=steps[1])
        model = copy.deepcopy(start)
        metrics, _ = run_update(update_cls(cfg, **kw), model, client, cfg, global_state=received)
        assert metrics["steps"] == steps[0] * steps[1]
        return model

    # the first step starts at w = w^t, where the term and its gradient vanish
    one = [train(fedprox.ProximalUpdate, (1, 1), mu=mu).state_dict() for mu in (0.0, 50.0)]
    assert all(torch.equal(one[0][k], one[1][k]) for k in one[0])
    # 6 steps: lr 0.01 * mu 50 pulls the shared weights halfway back to w^t at every step
    dist = {mu: shared_distance(train(fedprox.ProximalUpdate, (3, 2), mu=mu), received) for mu in (0.0, 50.0)}
    assert 0 < dist[50.0] < 0.7 * dist[0.0]
    # mu = 0 is exactly FedPav's client update
    plain, prox0 = train(SupervisedUpdate, (3, 1)).state_dict(), train(fedprox.ProximalUpdate, (3, 1), mu=0.0)
    assert all(torch.equal(plain[k], v) for k, v in prox0.state_dict().items())
    assert all(torch.equal(received[k], v) for k, v in CLASSIFIER_LOCAL.shared(start.state_dict()).items())


# --------------------------------------------------------------------------- MOON+D
def test_moon_contrastive_loss_by_hand():
    z = torch.tensor([[1.0, 0.0], [1.0, 1.0]], requires_grad=True)
    z_glob = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    z_prev = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    tau = 0.5
    cos_glob, cos_prev = [1 / math.sqrt(2), 1.0], [0.0, -1 / math.sqrt(2)]
    by_hand = sum(-math.log(math.exp(g / tau) / (math.exp(g / tau) + math.exp(p / tau)))
                  for g, p in zip(cos_glob, cos_prev)) / 2
    assert moon.model_contrastive_loss(z, z_glob, z_prev, tau).item() == pytest.approx(by_hand, rel=1e-6)
    # with z_prev == z_glob (round 1 in MOON's code) the term is log 2 with no gradient: skipping it is exact
    same = moon.model_contrastive_loss(z, z_glob, z_glob, tau)
    assert same.item() == pytest.approx(math.log(2))
    (grad,) = torch.autograd.grad(same, z)
    assert torch.allclose(grad, torch.zeros_like(grad), atol=1e-7)


def test_moon_reference_features_equal_a_separate_eval_model():
    model = fresh_model(4).train()
    other = fresh_model(4)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(0.9)
    state = moon.representation_state(other)
    before = clone_state(state)
    x = torch.rand(3, 3, 32, 16)
    feats = moon.reference_features(model, state, x)
    assert torch.allclose(feats, other.eval()(x), atol=1e-5)
    assert model.training and not feats.requires_grad
    assert all(torch.equal(before[k], v) for k, v in state.items())  # BN buffers of the reference untouched


def test_moon_first_round_is_fedpav_then_the_term_applies(tiny_synth, fed):
    cfg = direct_config(tiny_synth)
    client = fed.clients[0]
    start = fresh_model(client.num_classes)
    update = moon.ModelContrastiveUpdate(cfg, mu=1.0, tau=0.5)

    # first participation: no previous model, contrastive term skipped -> exactly FedPav's step
    model, plain = copy.deepcopy(start), copy.deepcopy(start)
    memory: dict = {}
    metrics, _ = run_update(update, model, client, cfg, memory=memory)
    run_update(SupervisedUpdate(cfg), plain, client, cfg)
    assert metrics["con_steps"] == 0 and metrics["steps"] == 3
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in model.state_dict().items())
    # memory holds the previous local model: backbone + neck, detached CPU copies
    prev = memory[moon.PREV_STATE]
    assert set(prev) == {k for k in model.state_dict() if not k.startswith("classifier.")}
    assert all(torch.equal(prev[k], v) for k, v in model.state_dict().items() if k in prev)
    assert all(v.data_ptr() != model.state_dict()[k].data_ptr() for k, v in prev.items())

    # next round: a new global model arrives (here: the start state), the term applies at every step
    global_state = clone_state(CLASSIFIER_LOCAL.shared(start.state_dict()))
    model.load_state_dict(global_state, strict=False)
    plain.load_state_dict(global_state, strict=False)
    prev_before = clone_state(prev)
    metrics, _ = run_update(update, model, client, cfg, memory=memory, round_index=1, global_state=global_state)
    run_update(SupervisedUpdate(cfg), plain, client, cfg, round_index=1, global_state=global_state)
    assert metrics["con_steps"] == 3 and 0 < metrics["con"] < 10 and math.isfinite(metrics["loss"])
    assert not torch.equal(plain.state_dict()["neck.fc.weight"], model.state_dict()["neck.fc.weight"])
    assert all(torch.equal(prev_before[k], v) for k, v in prev.items())  # the old state was only read
    assert all(torch.equal(global_state[k], v)
               for k, v in CLASSIFIER_LOCAL.shared(start.state_dict()).items())  # global state only read
    new_prev = memory[moon.PREV_STATE]
    assert all(torch.equal(new_prev[k], model.state_dict()[k]) for k in new_prev)


# --------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("method", ["fedprox", "moon"])  # fedavg: above; fedbn: its fixture
def test_trains_end_to_end_and_checkpoint_loads(method, tiny_synth, fed, tmp_path):
    cfg = tiny_config(tiny_synth, method=method, rounds=2, every=2)
    summary = FederatedEngine(cfg, fed, tmp_path, progress=False, build=build_run).run()
    assert summary["method"] == method and 0.0 <= summary["global_unseen"]["rank1"] <= 1.0
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    model = load_model(ckpt)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ckpt["global_state"].items())
    assert load_model(ckpt, client="synthB").num_classes == 6
    train = [m for m in ckpt["metrics"] if m["scope"] == "train"]
    assert len(train) == 4
    if method == "fedprox":
        assert all(m["prox"] > 0 for m in train)  # the term is active from the 2nd step of every round
    if method == "moon":
        assert [m["con_steps"] for m in train] == [0, 0, 2, 2]  # skipped in round 1, applied in round 2
        for name in ("synthA", "synthB"):
            prev = ckpt["client_memory"][name][moon.PREV_STATE]
            assert set(prev) == set(ckpt["global_state"])  # backbone + neck, round-trips the safe loader
