"""DPPT (L2RW+, paper 003): federated runs on a CI-like by-camera federation, ablation options, V-DPPT."""

import dataclasses

import pytest
import torch

from privreid.checkpoint import load_checkpoint, load_model
from privreid.data import PKSampler
from privreid.data.catalog import federation_for_config
from privreid.data.transforms import ChannelAugmentation
from privreid.errors import ConfigError
from privreid.evaluation.model_eval import evaluate_model
from privreid.federated.client import ClientContext
from privreid.federated.engine import FederatedEngine
from privreid.federated.methods.dppt import (DPPTAggregate, DPPTUpdate, GlobalLabelClient, centre_state,
                                             global_label_clients, identity_key, initial_classifier,
                                             make_client_update, model_state, one_cycle_factor,
                                             settings_for, temporal_forward)
from privreid.federated.mrb import global_memory
from privreid.federated.policy import CLASSIFIER_LOCAL, clone_state, state_nbytes
from privreid.federated.strategy import weighted_average
from privreid.models import build_model
from privreid.precision import to_device
from privreid.seeding import derive_seed, seed_everything

from conftest import spy_on_uploads, tiny_config
from privreid.composition import build_run

CPU = torch.device("cpu")


def dppt_config(root, rounds=1, max_steps=None, **opts):
    """One training domain split by camera (3 clients sharing identities: CI-like), unseen synthC.

    Whole PK epochs by default; evaluation after the last round only.
    """
    cfg = tiny_config(root, method="dppt", rounds=rounds, method_options=opts, max_steps_per_epoch=max_steps,
                      every=rounds)
    cfg.data.protocol, cfg.data.train_domains = "by-camera", ["synthA"]
    return cfg


def held(client):
    """The labels a client has images of (with the shared classifier, a subset of the global labels)."""
    return {pid for _, pid, _ in client.train}


def drawn_labels(cfg, client, round_index):
    """The labels of the PK epoch the engine's client ``round_index`` draws (P = 2, K = 8; a PK epoch may
    leave an identity out when fewer than P identities have images left)."""
    sampler = PKSampler(client.train, p=2, k=8, seed=derive_seed(cfg.runtime.seed, "client", round_index, client.name))
    return {client.train[i][1] for i in sampler}


# --------------------------------------------------------------------------- federated runs
@pytest.fixture(scope="module")
def two_rounds(tiny_synth, tmp_path_factory):
    """2 rounds of dppt (default: one shared classifier over the global labels) with every upload the server
    received."""
    cfg = dppt_config(tiny_synth, rounds=2)
    out = tmp_path_factory.mktemp("dppt")
    received = []  # (round, client, what the server transmitted)
    configure = FederatedEngine.configure

    def spy(self, client, round_index):
        state = configure(self, client, round_index)
        received.append((round_index, client.name, state))
        return state

    with pytest.MonkeyPatch.context() as mp:
        seen = spy_on_uploads(mp, DPPTAggregate)
        mp.setattr(FederatedEngine, "configure", spy)
        engine = FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, build=build_run)
        summary = engine.run()
    engine.received = received
    return cfg, engine, summary, seen, out


def test_trains_by_camera_and_checkpoint_evaluates(two_rounds):
    cfg, engine, summary, seen, out = two_rounds
    assert [c.name for c in engine.clients] == ["synthA/c0", "synthA/c1", "synthA/c2"]
    ckpt = load_checkpoint(out / "ckpt.pt")
    shared = set(CLASSIFIER_LOCAL.shared(engine.model.state_dict()))
    assert set(ckpt["global_state"]) == shared  # model keys only: any reader can load it
    model = load_model(ckpt)
    res = evaluate_model(model, engine.federation.unseen[0], height=32, width=16)
    assert 0.0 <= res["mAP"] <= 1.0
    last_global = [m for m in ckpt["metrics"] if m["scope"] == "global" and m["split"] == "unseen"][-1]
    assert summary["global_unseen"]["rank1"] == pytest.approx(last_global["rank1"])
    assert res["rank1"] == pytest.approx(last_global["rank1"])  # the checkpoint's global model is the one scored


def test_uploads_carry_model_and_one_centre_per_identity(two_rounds):
    cfg, engine, summary, seen, out = two_rounds
    # the whole model, the global-label classifier included (Eq. 8); the engine's model was last loaded for
    # evaluation, without a classifier
    every_key = set(engine.model.state_dict()) | {"classifier.weight"}
    clients = {c.name: c for c in engine.clients}
    assert len(seen) == 2
    for r, uploads in enumerate(seen):
        for u in uploads:
            c = clients[u.client]
            centres = {k for k in u.state if k.startswith("mrb/")}
            assert centres == {identity_key(c, label) for label in drawn_labels(cfg, c, r)}
            assert len(centres) >= len(held(c)) - 1
            assert set(u.state) - centres == every_key
            assert u.state["classifier.weight"].shape == (6, 32)  # the domain's 6 identities, on every camera
            assert all(u.state[k].shape == (32,) for k in centres)
            assert all(isinstance(v, float) for v in u.metrics.values())
    # bytes up: the model and the centres
    assert summary["comm_bytes_up"] == sum(state_nbytes(u.state) for uploads in seen for u in uploads)


def test_global_memory_is_eq5_of_the_uploads_and_reaches_clients(two_rounds):
    cfg, engine, summary, seen, out = two_rounds
    ckpt = load_checkpoint(out / "ckpt.pt")
    rounds = [global_memory([centre_state(u.state) for u in uploads]) for uploads in seen]
    last = centre_state(ckpt["server_state"])
    assert set(last) == set(rounds[1])
    for key, centre in rounds[1].items():
        assert torch.allclose(last[key], centre)
    holders = [sum(key in u.state for u in seen[1]) for key in last]
    assert max(holders) >= 2 and min(holders) >= 1  # identities seen by several cameras are pooled
    # round 2 trained towards the round-1 global memory: each client received its identities' centres
    assert [(r, name) for r, name, _ in engine.received] == [(r, c.name) for r in (0, 1) for c in engine.clients]
    for (r, name, state), c in zip(engine.received, engine.clients * 2):
        assert not any(k.startswith("mrb/") for k in state)  # never another client's centres
        if r == 0:
            assert "mrb_global_centres" not in state  # no global memory yet
            continue
        for label in range(c.num_classes):
            centre = rounds[0].get(identity_key(c, label))
            assert bool(state["mrb_global_known"][label]) == (centre is not None)
            assert torch.allclose(state["mrb_global_centres"][label], torch.zeros(32) if centre is None else centre)
    assert not any("mrb_global_centres" in m for m in ckpt["client_memory"].values())  # the server writes none
    train = [m for m in ckpt["metrics"] if m["scope"] == "train"]
    assert all(m["mrb_steps"] == 0 for m in train if m["round"] == 1)  # no global memory yet
    assert all(m["mrb_steps"] == m["steps"] > 0 and m["mrb"] > 0 for m in train if m["round"] == 2)


def run_killed_in_round_2(cfg, out) -> None:
    """Train ``cfg`` into ``out`` until the server's round-2 aggregation, which is interrupted (KeyboardInterrupt)."""
    calls = []
    original = DPPTAggregate.accumulator

    def crash_in_round_2(self, global_state):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, global_state)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DPPTAggregate, "accumulator", crash_in_round_2)
        with pytest.raises(KeyboardInterrupt):
            FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, build=build_run).run()


def test_resume_continues_exactly(two_rounds, tmp_path):
    """Killed in round 2 (after the round-1 checkpoint), resumed: same model and global memory."""
    cfg, engine, summary, seen, out = two_rounds
    run_killed_in_round_2(cfg, tmp_path)
    assert load_checkpoint(tmp_path / "ckpt.pt")["round"] == 1
    FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, build=build_run).run(resume=True)
    full, resumed = load_checkpoint(out / "ckpt.pt"), load_checkpoint(tmp_path / "ckpt.pt")
    for part in ("global_state", "server_state"):
        assert set(full[part]) == set(resumed[part]) and full[part]
        assert all(torch.equal(full[part][k], resumed[part][k]) for k in full[part])


# --------------------------------------------------------------------------- the shared classifier
def test_global_labels_key_identities_by_domain_and_pid(tiny_synth):
    cams = federation_for_config(dppt_config(tiny_synth)).clients
    relabelled = global_label_clients(cams)
    for before, after in zip(cams, relabelled):
        assert isinstance(after, GlobalLabelClient) and after.name == before.name
        assert after.num_classes == 6 and after.identities == relabelled[0].identities  # one label space
        for (path, local, cam), (path2, g, cam2) in zip(before.train, after.train):
            assert (path, cam) == (path2, cam2)
            assert after.identities[g] == ("synthA", before.source_pids[local])  # same person, same label
            assert identity_key(after, g) == identity_key(before, local)  # memory keys unchanged
    # entities (by-dataset clients) never share an identity: the label space is the union
    cfg = tiny_config(tiny_synth, method="dppt")
    datasets = federation_for_config(cfg).clients
    union = global_label_clients(datasets)
    assert union[0].num_classes == sum(c.num_classes for c in datasets) == 12
    assert not held(union[0]) & held(union[1])


def test_every_client_starts_from_the_same_classifier(tiny_synth):
    cfg = dppt_config(tiny_synth)
    heads = []
    for state_seed in (1, 2):
        torch.manual_seed(state_seed)
        model = build_model(arch="resnet18", feat_dim=32, num_classes=6)
        before = torch.rand(1)
        torch.manual_seed(state_seed)
        model = build_model(arch="resnet18", feat_dim=32, num_classes=6)
        initial_classifier(model, cfg)
        assert torch.equal(torch.rand(1), before)  # the client's random stream is untouched
        heads.append(model.classifier.weight.detach().clone())
    assert torch.equal(heads[0], heads[1]) and heads[0].shape == (6, 32)
    cfg.runtime.seed = 1
    other = build_model(arch="resnet18", feat_dim=32, num_classes=6)
    initial_classifier(other, cfg)
    assert not torch.equal(other.classifier.weight, heads[0])  # drawn from the run's seed


def test_classifier_is_averaged_like_every_layer_and_downloaded(two_rounds):
    cfg, engine, summary, seen, out = two_rounds
    ckpt = load_checkpoint(out / "ckpt.pt")
    uploads = [dataclasses.replace(u, state=model_state(u.state)) for u in seen[1]]
    expected = weighted_average(uploads, [float(u.num_samples) for u in uploads])  # Eq. 8
    for key in ("classifier.weight", "neck.fc.weight"):
        stored = ckpt["server_state"] if key.startswith("classifier.") else ckpt["global_state"]
        assert torch.allclose(stored[key], expected[key])
    received = DPPTAggregate().configure({**ckpt["global_state"], **ckpt["server_state"]}, engine.clients[0], {}, 2)
    assert torch.equal(received["classifier.weight"], ckpt["server_state"]["classifier.weight"])
    assert ckpt["client_states"] == {c.name: {} for c in engine.clients}  # nothing stays local
    assert not any("local classifier" in d for d in summary["deviations"])


def test_local_classifier_variant_keeps_heads_on_the_clients(tiny_synth, tmp_path, monkeypatch):
    from conftest import spy_on_uploads

    rounds = spy_on_uploads(monkeypatch, DPPTAggregate)
    cfg = dppt_config(tiny_synth, max_steps=1, shared_classifier=False)
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, build=build_run)
    summary = engine.run()
    assert not any(isinstance(c, GlobalLabelClient) for c in engine.clients)
    assert all(not any(k.startswith("classifier.") for k in u.state) for u in rounds[0])
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert all(set(s) == {"classifier.weight"} for s in ckpt["client_states"].values())
    assert ckpt["client_classes"] == {c.name: len(held(c)) for c in engine.clients}
    assert any("local classifier" in d for d in summary["deviations"])


# --------------------------------------------------------------------------- the client update
@pytest.fixture(scope="module")
def camera_client(tiny_synth):
    """A camera with 6 identities: PK epochs with P = 2 draw every one of them."""
    client = federation_for_config(dppt_config(tiny_synth)).clients[1]
    assert client.num_classes == 6
    return client


def run_client(cfg, client, memory=None, round_index=0, update=None, received=None):
    """One client update on a fresh tiny model, ``received`` the server's extras; ``(update, ctx, metrics, state)``."""
    update = update or make_client_update(cfg)
    seed_everything(0)
    model = build_model(arch="resnet18", feat_dim=32, num_classes=client.num_classes)
    ctx = ClientContext(model=model, client=client, round=round_index, config=cfg, device=CPU,
                        global_state=clone_state(CLASSIFIER_LOCAL.shared(model.state_dict())), seed=0,
                        memory=memory or {}, received_extra=received or {})
    metrics = update(ctx)
    return update, ctx, metrics, model.state_dict()


def known_centres(client, value=1.0):
    return {"mrb_global_centres": torch.full((client.num_classes, 32), value),
            "mrb_global_known": torch.ones(client.num_classes, dtype=torch.bool)}


def test_loader_is_pk_with_the_chosen_channel_augmentation(tiny_synth, camera_client):
    for ca, mode in (("channel", "channel"), ("gray", "gray"), ("none", None)):
        cfg = dppt_config(tiny_synth, ca=ca, instances=4)
        update = make_client_update(cfg)
        ctx = ClientContext(model=None, client=camera_client, round=0, config=cfg, device=CPU, global_state={},
                            seed=0)
        loader = update.loader(ctx, 0)
        assert isinstance(loader.sampler, PKSampler) and (loader.sampler.p, loader.sampler.k) == (2, 4)
        augs = [t for t in loader.dataset.transform.transforms if isinstance(t, ChannelAugmentation)]
        assert [a.mode for a in augs] == ([mode] if mode else [])


def test_the_loader_yields_uint8_images_the_client_channel_augments_as_the_loader_would(tiny_synth, camera_client):
    """Issue 29: DPPT's images are augmented on the training device too (``augment_later``), with the channel
    augmentation, flips, crops and erasing of the loader path bit for bit, and the random stream after them."""
    update = make_client_update(dppt_config(tiny_synth, ca="channel", ca_p=0.5, instances=4))
    ctx = ClientContext(model=None, client=camera_client, round=0, config=update.config, device=CPU, global_state={},
                        seed=0)
    runs = []
    for later in (True, False):
        torch.manual_seed(5)
        loader = update.loader(ctx, 0)
        assert loader.dataset.augment_later  # what DPPT's client trains on
        loader.dataset.augment_later = later
        augment = loader.dataset.augmentation()
        batches = [(images.dtype, to_device(images, "cpu", augment)) for images, _, _ in loader]
        runs.append((batches, torch.get_rng_state()))
    (later, later_state), (reference, reference_state) = runs
    assert {dtype for dtype, _ in later} == {torch.uint8} and {dtype for dtype, _ in reference} == {torch.float32}
    assert len(later) == len(reference) > 1
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(later, reference))
    assert torch.equal(later_state, reference_state)


def test_mrb_option_controls_centres_and_the_loss(tiny_synth, camera_client):
    _, ctx, metrics, _ = run_client(dppt_config(tiny_synth), camera_client, received=known_centres(camera_client))
    assert set(ctx.upload_extra) == {identity_key(camera_client, k) for k in range(camera_client.num_classes)}
    assert metrics["mrb_steps"] == metrics["steps"] == 3 and metrics["centres"] == camera_client.num_classes
    assert 0.0 <= metrics["mrb"] <= 2.0
    _, ctx, off, w_off = run_client(dppt_config(tiny_synth, max_steps=2, mrb=False), camera_client,
                                    received=known_centres(camera_client))
    assert ctx.upload_extra == {} and off["mrb_steps"] == 0 and off["centres"] == 0
    # lambda = 0 is the same objective as no MRB (same weights); lambda = 1 is not
    _, _, _, w_zero = run_client(dppt_config(tiny_synth, max_steps=2, lambda_mrb=0.0), camera_client,
                                 received=known_centres(camera_client))
    _, _, _, w_one = run_client(dppt_config(tiny_synth, max_steps=2), camera_client,
                                received=known_centres(camera_client))
    key = "neck.fc.weight"
    assert torch.equal(w_zero[key], w_off[key]) and not torch.equal(w_one[key], w_off[key])


def test_circle_and_base_options(tiny_synth, camera_client):
    _, _, on, w_on = run_client(dppt_config(tiny_synth, max_steps=2, mrb=False), camera_client)
    _, _, off, w_off = run_client(dppt_config(tiny_synth, max_steps=2, mrb=False, circle=False), camera_client)
    assert on["circle"] > 0 and off["circle"] == 0 and not torch.equal(w_on["neck.fc.weight"],
                                                                          w_off["neck.fc.weight"])
    _, _, prox, _ = run_client(dppt_config(tiny_synth, max_steps=2, mrb=False, base="fedprox", prox_mu=0.5),
                               camera_client)
    assert prox["prox"] > 0  # FedProx's term is in the local objective
    cfg = dppt_config(tiny_synth, max_steps=2, mrb=False, base="moon")
    update = make_client_update(cfg)
    _, ctx, first, _ = run_client(cfg, camera_client, update=update)
    _, _, second, _ = run_client(cfg, camera_client, memory=ctx.memory, round_index=1, update=update)
    assert first["con_steps"] == 0 and second["con_steps"] == second["steps"]  # MOON's term from round 2


def test_one_cycle_schedule():
    assert one_cycle_factor(0.0, 50) == pytest.approx(1e-4)
    assert one_cycle_factor(16.0, 50) == pytest.approx(1.0)  # peak at epoch 16 of 50 (0.32)
    assert one_cycle_factor(50.0, 50) == pytest.approx(0.0)
    assert one_cycle_factor(8.0, 50) == pytest.approx(1e-4 + (1 - 1e-4) * 0.5)
    assert one_cycle_factor(33.0, 50) == pytest.approx(0.5)


def test_schedule_step_sets_rates_from_global_progress(tiny_synth):
    cfg = dppt_config(tiny_synth, rounds=2)
    update = make_client_update(cfg)
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [param], "lr": 0.1}, {"params": [], "lr": 0.2}])
    ctx = ClientContext(model=None, client=None, round=1, config=cfg, device=CPU, global_state={}, seed=0)
    for _ in range(2):  # the configured rate is the peak, not compounded
        update.schedule_step(ctx, opt, epoch=0, step=1, n_batches=2)
        factor = 1 - (1.5 - 0.64) / (2 - 0.64)  # progress 1.5 of 2 epochs, peak at 0.64
        assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1 * factor, 0.2 * factor])
    flat = make_client_update(dppt_config(tiny_synth, rounds=2, onecycle=False))
    opt = torch.optim.SGD([param], lr=0.1)
    flat.schedule_step(ctx, opt, epoch=0, step=1, n_batches=2)
    assert opt.param_groups[0]["lr"] == 0.1
    # one-cycle replaces the step decay: round 45 of a run with lr_step 40 still peaks at the configured rates
    model = build_model(arch="resnet18", feat_dim=32, num_classes=3)
    rates = {onecycle: [g["lr"] for g in make_client_update(dppt_config(tiny_synth, onecycle=onecycle))
                        .optimizer(model, 45).param_groups] for onecycle in (True, False)}
    assert rates[True] == pytest.approx([0.01, 0.05]) and rates[False] == pytest.approx([0.001, 0.005])


def test_option_errors(tiny_synth):
    for opts, message in (({"ca": "rgb"}, "ca must be one of"), ({"topk": 0}, "topk must be an integer"),
                          ({"base": "fednova"}, "base must be one of"), ({"lambda_mrb": -1}, "lambda_mrb"),
                          ({"mrb": "maybe"}, "mrb must be true or false"), ({"instances": 2.5}, "instances"),
                          ({"shared_classifier": 2}, "shared_classifier must be true or false")):
        with pytest.raises(ConfigError, match=message):
            make_client_update(dppt_config(tiny_synth, **opts))
    # the one boolean rule of every method's options (privreid.config.values.parse_bool): yes/no, 1/0 are booleans
    assert settings_for(dppt_config(tiny_synth, mrb="yes", shared_classifier="no")).mrb is True
    assert settings_for(dppt_config(tiny_synth, shared_classifier=0)).shared_classifier is False
    with pytest.raises(ConfigError, match="has no option"):
        FederatedEngine(dppt_config(tiny_synth, lamda=1), federation_for_config(dppt_config(tiny_synth)), "x", build=build_run)


# --------------------------------------------------------------------------- V-DPPT
def test_temporal_forward_is_the_mean_of_frame_features():
    torch.manual_seed(0)
    model = build_model(arch="resnet18", feat_dim=32, num_classes=5).eval()
    clips = torch.randn(2, 3, 3, 32, 16)
    with torch.no_grad():
        pre, z, logits = temporal_forward(model, clips)
        frames = model(clips.flatten(0, 1)).view(2, 3, -1)
    assert pre.shape == (2, model.backbone.out_dim)
    assert torch.allclose(z, frames.mean(1), atol=1e-5)
    assert torch.allclose(logits, model.classifier(z), atol=1e-6)


@pytest.fixture(scope="module")
def video_config(tmp_path_factory):
    """A tiny synthetic visible-infrared video federation (tracklets of 4 frames), CI protocol, 2 entities."""
    from privreid.data.synthetic_vi import SynthVIConfig, generate_synthetic_vi

    root = generate_synthetic_vi(tmp_path_factory.mktemp("vid") / "vi", SynthVIConfig(
        num_entities=2, ids_per_entity=6, test_ids_per_entity=4, cams_per_entity=3, shots_per_id_per_cam=2,
        video=True, frames_per_tracklet=4, height=32, width=16))
    cfg = dppt_config(root, instances=4, seq_len=3)
    cfg.data.protocol, cfg.data.train_domains, cfg.data.test_domains = "ci", ["vidA"], ["vidB"]
    return cfg


def test_v_dppt_trains_on_clips_of_tracklets(video_config, tmp_path):
    fed = federation_for_config(video_config)
    client = next(c for c in fed.clients if c.num_classes == 6)  # P = 2 draws every identity
    assert client.tracklets is not None
    shapes = []
    original = DPPTUpdate.forward

    def record(self, ctx, images):
        shapes.append(tuple(images.shape))
        return original(self, ctx, images)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DPPTUpdate, "forward", record)
        _, ctx, metrics, _ = run_client(video_config, client, received=known_centres(client))
    assert shapes == [(8, 3, 3, 32, 16)] * 3  # P x K = 2 x 4 clips of T = 3 frames; 6 identities
    assert metrics["mrb_steps"] == 3 and metrics["circle"] > 0
    assert set(ctx.upload_extra) == {identity_key(client, k) for k in range(client.num_classes)}
    # one federated round end to end; the checkpoint evaluates on the unseen entity (clip features)
    summary = FederatedEngine(video_config, fed, tmp_path, progress=False, build=build_run).run()
    assert load_checkpoint(tmp_path / "ckpt.pt")["server_state"]
    assert 0.0 <= summary["global_unseen"]["mAP"] <= 1.0
    moon_cfg = dppt_config(video_config.data.roots[0], base="moon")
    moon = make_client_update(moon_cfg)
    with pytest.raises(ConfigError, match="clip"):
        moon.forward(ClientContext(model=None, client=None, round=0, config=moon_cfg, device=CPU,
                                   global_state={}, seed=0), torch.zeros(1, 2, 3, 32, 16))


def test_personalised_model_carries_the_shared_classifier(two_rounds):
    """load_model(client=...) of a shared-classifier run has the global-label classifier (needed by iDLG/IG)."""
    cfg, engine, summary, seen, out = two_rounds
    ckpt = load_checkpoint(out / "ckpt.pt")
    model = load_model(ckpt, client=engine.clients[0].name)
    assert torch.equal(model.state_dict()["classifier.weight"], ckpt["server_state"]["classifier.weight"])
