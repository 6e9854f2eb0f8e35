"""FedPav's optimisations (paper 004, Sec. 5): CDW (Eq. 1-2), KD (Alg. 3), FINCH client clustering (Alg. 2)."""

import numpy as np
import pytest
import torch

import privreid.federated.methods.fedpav_variants as fv
from privreid.checkpoint import TRAINED_PREFIX, load_checkpoint, load_model
from privreid.data.catalog import build_federation
from privreid.data.synthetic_cache import read_manifest
from privreid.errors import ConfigError
from privreid.federated.client import ClientContext
from privreid.federated.clustering import first_neighbours, first_partition, groups
from privreid.federated.engine import FederatedEngine
from privreid.federated.public_data import (PublicSet, load_public_set, public_batch_size, public_size,
                                              public_synth_seed, synthetic_public_root)
from privreid.federated.strategy import Upload
from privreid.models import build_model

from conftest import tiny_config
from privreid.composition import build_run

TINY_PUBLIC = {"public_size": 16, "public_batch": 8}
TINY_MODEL = dict(arch="resnet18", feat_dim=8)


def toy(name, n, w, **metrics):
    return Upload(name, {"w": torch.tensor(w, dtype=torch.float32)}, n, {k: float(v) for k, v in metrics.items()})


def tiny_model(seed, num_classes=0):
    torch.manual_seed(seed)
    return build_model(num_classes=num_classes, **TINY_MODEL).eval()


def shared_state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith("classifier.")}


# ----------------------------------------------------------------------------- CDW


def test_cdw_weights_are_normalised_cosine_distances():
    # Eq. 2 with d = (0.1, 0.3, 0.6): p = d / 1.0; data volumes (1000 / 1 / 1) are ignored
    ups = [toy("a", 1000, [1.0, 0.0], cdw_distance=0.1), toy("b", 1, [0.0, 1.0], cdw_distance=0.3),
           toy("c", 1, [2.0, 2.0], cdw_distance=0.6)]
    assert fv.cosine_distance_weights(ups) == pytest.approx([0.1, 0.3, 0.6])
    out = fv.WeightedAverage(fv.cosine_distance_weights).aggregate({}, ups).global_state
    assert torch.allclose(out["w"], torch.tensor([0.1 * 1 + 0.6 * 2, 0.3 * 1 + 0.6 * 2]))
    # every distance zero (nothing learnt): data-volume weights
    flat = [toy("a", 3, [0.0], cdw_distance=0.0), toy("b", 1, [4.0], cdw_distance=0.0)]
    assert fv.cosine_distance_weights(flat) == pytest.approx([0.75, 0.25])
    with pytest.raises(ValueError, match="cdw_distance"):
        fv.cosine_distance_weights([toy("a", 1, [0.0])])
    with pytest.raises(ValueError, match="non-finite"):
        fv.cosine_distance_weights([toy("a", 1, [0.0], cdw_distance=float("nan"))])


def test_cosine_distance_is_eq1_per_image_averaged():
    before = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    after = torch.tensor([[0.0, 2.0], [2.0, 2.0]])  # 90 degrees, then 0 degrees
    assert fv.cosine_distance(before, after) == pytest.approx((1.0 + 0.0) / 2)


def test_cdw_probe_measures_the_loaded_and_the_trained_model():
    model = tiny_model(0, num_classes=3)
    public = PublicSet(torch.randn(12, 3, 16, 8, generator=torch.Generator().manual_seed(1)), "random")
    w_before = model.classifier.weight.detach().clone()
    w_after = torch.tensor([[1.0] * 8, [-1.0] * 8, [0.5, -0.5] * 4])

    def train(ctx):  # "local training" that only moves the local classifier, so g can be computed by hand
        with torch.no_grad():
            ctx.model.classifier.weight.copy_(w_after)
        return {"loss": 0.0}

    probe = fv.CosineDistanceProbe(train, public, batch_size=5, seed=7)
    ctx = ClientContext(model=model, client=None, round=3, config=None, device=torch.device("cpu"),
                        global_state={}, seed=0)
    rng = torch.get_rng_state()
    metrics = probe(ctx)
    assert torch.equal(torch.get_rng_state(), rng)  # the probe draws nothing from the global RNG
    x = probe.shared_batch(3)
    assert torch.equal(x, probe.shared_batch(3)) and not torch.equal(x, probe.shared_batch(4))
    with torch.no_grad():
        f = model(x).double().numpy()  # the backbone did not move
    g0, g1 = f @ w_before.double().numpy().T, f @ w_after.double().numpy().T
    hand = np.mean(1 - (g0 * g1).sum(1) / (np.linalg.norm(g0, axis=1) * np.linalg.norm(g1, axis=1)))
    assert metrics["loss"] == 0.0
    assert metrics["cdw_distance"] == pytest.approx(hand, rel=1e-6)
    assert 0.0 < metrics["cdw_distance"] <= 2.0


# ----------------------------------------------------------------------------- FINCH


def test_finch_two_far_blobs_give_two_clusters():
    rng = np.random.default_rng(0)
    a = np.array([1.0, 0.0, 0.0]) + 0.01 * rng.standard_normal((4, 3))
    b = np.array([0.0, 0.0, 1.0]) + 0.01 * rng.standard_normal((3, 3))
    x = np.concatenate([a, b])[[0, 4, 1, 5, 2, 6, 3]]  # interleaved
    labels = first_partition(x)
    assert labels.tolist() == [0, 1, 0, 1, 0, 1, 0]
    assert groups(labels) == [[0, 2, 4, 6], [1, 3, 5]]


def angles(*degrees):
    r = np.radians(degrees)
    return np.stack([np.cos(r), np.sin(r)], axis=1)


def test_finch_first_neighbour_semantics_by_hand():
    # angles 0, 10, 30 | 100, 105: kappa = (1, 0, 1, 4, 3); 30 joins {0, 10} via its first neighbour 10
    x = angles(0, 10, 30, 100, 105)
    assert first_neighbours(x).tolist() == [1, 0, 1, 4, 3]
    assert first_partition(x).tolist() == [0, 0, 0, 1, 1]
    # a chain 0, 10, 25, 45, 70: kappa = (1, 0, 1, 2, 3); no pair but (0, 10) is mutual, yet the
    # first-neighbour links connect everything into one cluster (no distance threshold)
    chain = angles(0, 10, 25, 45, 70)
    assert first_neighbours(chain).tolist() == [1, 0, 1, 2, 3]
    assert first_partition(chain).tolist() == [0, 0, 0, 0, 0]
    # cosine, not Euclidean: a far-away point in the same direction is a perfect neighbour
    assert first_partition(np.array([[1.0, 0.0], [100.0, 1.0], [0.0, 1.0], [1.0, 100.0]])).tolist() == [0, 0, 1, 1]
    assert first_partition(np.ones((1, 2))).tolist() == [0]
    assert first_partition(np.array([[1.0, 0.0], [0.0, 1.0]])).tolist() == [0, 0]


def test_finch_matches_the_adjacency_definition():
    """Components of A(i,j) = [j = k(i) or k(j) = i or k(i) = k(j)] (FINCH Eq. 1), by brute force."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.standard_normal((int(rng.integers(2, 12)), 3))
        k = first_neighbours(x)
        n = len(x)
        adj = np.array([[j == k[i] or k[j] == i or k[i] == k[j] for j in range(n)] for i in range(n)])
        reach = adj | np.eye(n, dtype=bool)
        for _ in range(n):
            reach = reach | ((reach.astype(int) @ reach.astype(int)) > 0)
        labels = first_partition(x)
        assert (reach == (labels[:, None] == labels[None, :])).all()


# ----------------------------------------------------------------------------- KD


def test_kd_fine_tuning_moves_the_aggregate_towards_the_averaged_soft_labels():
    images = torch.randn(8, 3, 16, 8, generator=torch.Generator().manual_seed(2))
    ups = [Upload(f"c{i}", shared_state(tiny_model(10 + i)), 10 * (i + 1)) for i in range(2)]
    before_call = {k: v.clone() for k, v in ups[0].state.items()}
    server = fv.ServerModel(dict(TINY_MODEL))
    strategy = fv.DistilledAverage(fv.data_volume_weights, server, images, lr=0.0005, epochs=1, batch_size=8)
    out = strategy.aggregate({}, ups).global_state

    model = server.build()
    targets = fv.soft_labels(server, model, [u.state for u in ups], images, 8)
    expected = (server.features(tiny_model(10), images) + server.features(tiny_model(11), images)) / 2
    assert torch.allclose(targets, expected, atol=1e-5)  # l = (1/K) sum_k l_k, unweighted (Alg. 3 line 10)
    server.load(model, fv.weighted_average(ups, fv.data_volume_weights(ups)))
    loss_average = fv.distillation_loss(server, model, images, targets)
    server.load(model, out)
    loss_distilled = fv.distillation_loss(server, model, images, targets)
    assert loss_distilled < loss_average

    assert set(out) == set(ups[0].state) and all(out[k].dtype == ups[0].state[k].dtype for k in out)
    assert all(torch.equal(before_call[k], ups[0].state[k]) for k in before_call)  # uploads untouched
    again = strategy.aggregate({}, ups).global_state
    assert all(torch.equal(out[k], again[k]) for k in out)  # pure: same inputs, same output


# ----------------------------------------------------------------------------- CC


def test_cluster_models_are_per_client_server_state_that_survives_a_checkpoint(tmp_path):
    class Client:
        def __init__(self, name):
            self.name = name

    ups = [toy("a", 1, [1.0], cdw_distance=0.2), toy("b", 3, [5.0], cdw_distance=0.6),
           toy("c", 2, [10.0], cdw_distance=0.1), toy("d", 2, [20.0], cdw_distance=0.3)]
    strategy = fv.ClusteredAverage(fv.cosine_distance_weights, server=None, batch=None)
    strategy.cluster_labels = lambda uploads: np.array([0, 1, 0, 1])  # {a, c}, {b, d}
    glob, clusters = strategy.cluster_aggregate(ups, [0, 1, 0, 1])
    assert [m for m, _ in clusters] == [["a", "c"], ["b", "d"]]
    # Alg. 2 line 12, CDW normalised within each cluster
    assert clusters[0][1]["w"].item() == pytest.approx((0.2 * 1 + 0.1 * 10) / 0.3)
    assert clusters[1][1]["w"].item() == pytest.approx((0.6 * 5 + 0.3 * 20) / 0.9)
    assert glob["w"].item() == pytest.approx((0.2 * 1 + 0.6 * 5 + 0.1 * 10 + 0.3 * 20) / 1.2)

    g = {"w": torch.tensor([-1.0])}
    for name in "abcd":
        assert strategy.configure(g, Client(name), {}, 0) is g  # never clustered: the global model
    out = strategy.aggregate(g, ups)
    assert out.global_state["w"].item() == pytest.approx(glob["w"].item())
    assert set(out.client_state) == set("abcd")
    assert out.client_state["a"][fv.CC_MEMBERS] == ["a", "c"]
    assert out.client_state["a"][fv.CC_MODEL] is out.client_state["c"][fv.CC_MODEL]  # one copy per cluster

    # the engine checkpoints the per-client server state; a resumed run transmits the cluster models
    torch.save(out.client_state, tmp_path / "state.pt")
    restored = torch.load(tmp_path / "state.pt", weights_only=True)
    fresh = fv.ClusteredAverage(fv.cosine_distance_weights, server=None, batch=None)
    assert fresh.configure(g, Client("b"), restored["b"], 1)["w"].item() == pytest.approx(clusters[1][1]["w"].item())
    assert fresh.configure(g, Client("c"), restored["c"], 1)["w"].item() == pytest.approx(clusters[0][1]["w"].item())


def test_clients_are_clustered_by_their_features_on_the_public_batch():
    base = [shared_state(tiny_model(20)), shared_state(tiny_model(21))]
    torch.manual_seed(3)
    near = [{k: v + 1e-3 * torch.randn_like(v) if v.is_floating_point() else v for k, v in s.items()} for s in base]
    ups = [Upload(n, s, 1) for n, s in zip("abcd", [base[0], base[1], near[1], near[0]])]
    batch = torch.randn(4, 3, 16, 8, generator=torch.Generator().manual_seed(4))
    strategy = fv.ClusteredAverage(fv.data_volume_weights, fv.ServerModel(dict(TINY_MODEL)), batch)
    assert strategy.cluster_labels(ups).tolist() == [0, 1, 1, 0]


# ----------------------------------------------------------------------------- public data


@pytest.mark.parametrize("opts,message", [
    ({"public_batch": 0}, "option public_batch must be an integer > 0, got 0"),
    ({"public_size": -1}, "option public_size must be an integer >= 0, got -1"),
    # the type is the options dataclass's to check (PublicOptions), the range the public set's
    ({"public_batch": 2.5}, "fedpav-cdw-kd option public_batch must be an integer, got 2.5"),
])
def test_public_set_options_are_checked(tiny_synth, opts, message):
    cfg = tiny_config(tiny_synth, method="fedpav-cdw-kd", method_options=opts)
    with pytest.raises(ConfigError) as error:
        public_size(cfg), public_batch_size(cfg)
    assert str(error.value) == message
    assert (public_size(tiny_config(tiny_synth, method="fedpav-cdw-kd", method_options={"public_size": 0})),
            public_batch_size(tiny_config(tiny_synth, method="fedpav-cdw-kd"))) == (0, 32)


def test_public_set_is_a_separate_deterministic_domain(tiny_synth):
    cfg = tiny_config(tiny_synth, method="fedpav-kd", method_options=dict(TINY_PUBLIC))
    public = load_public_set(cfg)
    assert public.images.shape == (16, 3, 32, 16)
    assert load_public_set(cfg) is public  # decoded once per process
    manifest = read_manifest(synthetic_public_root(16, 32, 16, cfg.data.synth_seed))
    assert manifest["config"]["seed"] == public_synth_seed(cfg.data.synth_seed) != cfg.data.synth_seed
    assert manifest["config"]["domain_shift"] == 0.0 and manifest["config"]["num_domains"] == 1
    # a directory: the train splits of its datasets, subset seeded by the run seed
    options = {**TINY_PUBLIC, "public_data": str(tiny_synth)}
    from_dir = tiny_config(tiny_synth, method="fedpav-kd", method_options=options)
    other_seed = tiny_config(tiny_synth, method="fedpav-kd", seed=1, method_options=options)
    a, b = load_public_set(from_dir), load_public_set(other_seed)
    assert a.images.shape == b.images.shape == (16, 3, 32, 16) and not torch.equal(a.images, b.images)


@pytest.mark.parametrize("method", ["fedpav-kd", "fedpav-cc"])
def test_server_model_is_the_clients_network_with_the_defenses_transforms(tiny_synth, method):
    """KD and CC run the uploads in the network the clients train: under DP-SGD, with its GroupNorm."""
    from privreid.composition import build_method

    plain = tiny_config(tiny_synth, method=method, method_options=dict(TINY_PUBLIC))
    dp = tiny_config(tiny_synth, method=method, method_options=dict(TINY_PUBLIC), dp_sgd=True, noise_multiplier=1.0)
    for cfg, transforms in ((plain, []), (dp, [{"name": "group_norm"}])):
        method_run = build_method(cfg)
        server = method_run.strategy(cfg).server
        assert server.model_kwargs == {**method_run.model_config(cfg), "num_classes": 0}
        assert [{"name": t["name"]} for t in server.model_kwargs["transforms"]] == transforms
        server_keys = set(server.build().state_dict())
        assert server_keys == set(method_run.build_model(cfg, initial_weights=False).state_dict())


# ----------------------------------------------------------------------------- end to end


def federation(cfg):
    return build_federation(cfg.data.roots, test_domains=cfg.data.test_domains)


def tiny_run(root, method, rounds=1, **train):
    options = {**TINY_PUBLIC, **({"kd_batch_size": 16} if "kd" in method else {})}
    return tiny_config(root, method=method, rounds=rounds, batch_size=4, max_steps_per_epoch=1,
                       method_options=options, **train)


@pytest.mark.parametrize("method", ["fedpav-cdw", "fedpav-kd", "fedpav-cdw-kd", "fedpav-cc"])
def test_variant_trains_and_its_checkpoint_loads(tiny_synth, tmp_path, method):
    cfg = tiny_run(tiny_synth, method)
    summary = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run).run()
    assert set(summary["global_unseen_per_testset"]) == {"synthC"}
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    load_model(ckpt)
    load_model(ckpt, client="synthA")
    train = [m for m in ckpt["metrics"] if m["scope"] == "train"]
    assert all(isinstance(v, float) for m in train for k, v in m.items() if k not in ("round", "scope", "client"))
    if "cdw" in method:
        assert all(0.0 < m["cdw_distance"] <= 2.0 for m in train)
    if method == "fedpav-cc":  # two clients are each other's first neighbours: one cluster
        assert ckpt["server_client_state"]["synthA"][fv.CC_MEMBERS] == ["synthA", "synthB"]
    # client memory is the client's own: only what its training kept (its trained model), nothing from the server
    assert all(k.startswith(TRAINED_PREFIX) for memory in ckpt["client_memory"].values() for k in memory)


def test_clustered_run_resumes_exactly(tiny_synth, tmp_path, monkeypatch):
    """fedpav-cdw-cc: the cluster models (per-client server state) survive a crash between rounds."""
    monkeypatch.setattr(fv, "first_partition", lambda x: np.arange(len(x)))  # singleton clusters: w_c != w
    cfg = tiny_run(tiny_synth, "fedpav-cdw-cc", rounds=2, every=2)
    fed = federation(cfg)
    received = []
    real_configure = fv.ClusteredAverage.configure

    def spy(self, global_state, client, client_server_state, round_index):
        state = real_configure(self, global_state, client, client_server_state, round_index)
        received.append((round_index, client.name, state is global_state))
        return state

    monkeypatch.setattr(fv.ClusteredAverage, "configure", spy)
    FederatedEngine(cfg, fed, tmp_path / "full", progress=False, build=build_run).run()
    # round 0: nobody is clustered yet; round 1: each client starts from its own cluster's model
    assert received == [(0, "synthA", True), (0, "synthB", True), (1, "synthA", False), (1, "synthB", False)]

    real_select = FederatedEngine.select_clients

    def crash_in_round_2(self, round_index):
        if round_index == 1:
            raise KeyboardInterrupt
        return real_select(self, round_index)

    monkeypatch.setattr(FederatedEngine, "select_clients", crash_in_round_2)
    with pytest.raises(KeyboardInterrupt):
        FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run).run()
    monkeypatch.setattr(FederatedEngine, "select_clients", real_select)
    FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run).run(resume=True)

    full, cut = load_checkpoint(tmp_path / "full" / "ckpt.pt"), load_checkpoint(tmp_path / "cut" / "ckpt.pt")
    assert full["metrics"] == cut["metrics"]
    assert all(torch.equal(full["global_state"][k], cut["global_state"][k]) for k in full["global_state"])
    a, b = full["server_client_state"]["synthA"], cut["server_client_state"]["synthA"]
    assert a[fv.CC_MEMBERS] == b[fv.CC_MEMBERS] == ["synthA"] and a[fv.CC_MODEL].keys() == b[fv.CC_MODEL].keys()
    assert all(torch.equal(a[fv.CC_MODEL][k], b[fv.CC_MODEL][k]) for k in a[fv.CC_MODEL])
