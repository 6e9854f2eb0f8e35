"""L2RW+ privacy protocols CI / EI / ES: clients, unseen entities, VI side data, and tiny end-to-end runs."""

from dataclasses import replace

import pytest
from conftest import tiny_config

from privreid.checkpoint import load_model
from privreid.data import INFRARED, VISIBLE, ReIDDataset, VIProtocol, make_federation
from privreid.data.catalog import build_federation, federation_for_config
from privreid.data.synthetic_vi import SynthVIConfig, generate_synthetic_vi
from privreid.errors import ConfigError
from privreid.evaluation.model_eval import evaluate_model
from privreid.federated.engine import FederatedEngine
from privreid.models import build_model
from privreid.composition import build_run

KINDS = {0: VISIBLE, 1: INFRARED, 2: "both"}
PROTOCOL = VIProtocol(gallery_trials=10, cmc_by_identity=True)


def vi_entity(name: str, num_pids: int, video: bool = False) -> ReIDDataset:
    """Camera 0 visible, 1 infrared, 2 both (alternating); the last identity never passes camera 0."""
    modality, tracklets, train = {}, {}, []
    for pid in range(num_pids):
        for cam in range(3):
            if cam == 0 and pid == num_pids - 1:
                continue  # identity missing
            for i in range(2):
                mod = KINDS[cam] if cam < 2 else (VISIBLE, INFRARED)[i]
                path = f"/{name}/train/{mod}/c{cam + 1}/{pid:04d}/{i}"
                modality[path] = mod
                tracklets[path] = [f"{path}/f{t}.jpg" for t in range(3)]
                train.append((path, pid, cam))
    query = [(f"/{name}/q/{pid}", pid, 1) for pid in (100, 101)]
    gallery = [(f"/{name}/g/{pid}", pid, 0) for pid in (100, 101)]
    for path, _, _ in query:
        modality[path], tracklets[path] = INFRARED, [path + "/f0.jpg"]
    for path, _, _ in gallery:
        modality[path], tracklets[path] = VISIBLE, [path + "/f0.jpg"]
    return ReIDDataset(name, train, query, gallery, modality=modality, vi_protocol=PROTOCOL,
                       tracklets=tracklets if video else None)


@pytest.fixture
def entities():
    return {"A": vi_entity("A", 4), "B": vi_entity("B", 3), "C": vi_entity("C", 5)}


def test_ci_each_camera_is_a_client_without_modality(entities):
    fed = make_federation(entities, "ci", test_domains=["C"])
    assert fed.protocol == "ci"
    assert [c.name for c in fed.clients] == ["A/c0", "A/c1", "A/c2", "B/c0", "B/c1", "B/c2"]
    for client in fed.clients:
        ds = entities[client.domain]
        cam = int(client.name[-1])
        assert {c for _, _, c in client.train} == {cam}
        assert not hasattr(client, "modality")  # the method is not told what a camera records
        kinds = {ds.modality[path] for path, _, _ in client.train}
        assert kinds == ({VISIBLE, INFRARED} if cam == 2 else {KINDS[cam]})  # modality incomplete
        expected = [pid for pid in range(ds.num_train_pids) if not (cam == 0 and pid == ds.num_train_pids - 1)]
        assert client.source_pids == expected  # identity missing: camera 0 lacks the last identity
    assert [t.name for t in fed.seen] == ["A", "B"] and [t.name for t in fed.unseen] == ["C"]
    for ts in fed.seen + fed.unseen:
        ds = entities[ts.name]
        assert ts.modality is ds.modality and ts.vi_protocol == PROTOCOL and ts.tracklets is None
        assert ts.query is ds.query and ts.gallery is ds.gallery


def test_ei_each_entity_is_a_client_tested_on_an_unseen_entity(entities):
    fed = make_federation(entities, "ei", test_domains=["B"])
    assert [(c.name, c.domain) for c in fed.clients] == [("A", "A"), ("C", "C")]
    assert [c.num_classes for c in fed.clients] == [4, 5]
    assert [t.name for t in fed.unseen] == ["B"] and fed.unseen[0].modality is entities["B"].modality
    for protocol in ("ei", "es"):
        with pytest.raises(ConfigError, match=f"the {protocol} protocol tests on an unseen entity"):
            make_federation(entities, protocol)
    assert len(make_federation(entities, "ci").unseen) == 0  # CI tests on the seen entities


def test_es_pools_the_entities_into_one_client(entities):
    fed = make_federation(entities, "es", test_domains=["C"])
    [client] = fed.clients
    assert (client.name, client.domain) == ("es", "A+B") and client.source_pids is None
    # identities 0..2 exist in both A and B but are different people: 4 + 3 classes
    assert client.num_classes == 7 and client.num_samples == len(entities["A"].train) + len(entities["B"].train)
    by_path = {path: pid for path, pid, _ in client.train}
    assert len({by_path[p] for p, _, _ in entities["A"].train} & {by_path[p] for p, _, _ in entities["B"].train}) == 0
    assert [t.name for t in fed.seen] == ["A", "B"] and [t.name for t in fed.unseen] == ["C"]
    assert client.tracklets is None


def test_video_entities(entities):
    videos = {name: vi_entity(name, n, video=True) for name, n in (("A", 4), ("B", 3), ("C", 5))}
    for protocol in ("ci", "ei"):
        fed = make_federation(videos, protocol, test_domains=["C"])
        for client in fed.clients:
            assert client.tracklets is videos[client.domain].tracklets
            assert client.query == [] and client.gallery == []  # their seen test set is fed.seen
        assert all(t.tracklets is videos[t.name].tracklets for t in fed.seen + fed.unseen)
    [pooled] = make_federation(videos, "es", test_domains=["C"]).clients
    assert set(pooled.tracklets) == set(videos["A"].tracklets) | set(videos["B"].tracklets)


# --------------------------------------------------------------------------- tiny end-to-end runs


TINY_VI = SynthVIConfig(ids_per_entity=6, test_ids_per_entity=4, height=32, width=16)


@pytest.fixture(scope="module")
def tiny_vi(tmp_path_factory):
    return generate_synthetic_vi(tmp_path_factory.mktemp("vi") / "d", TINY_VI)


def vi_config(root, protocol, method, train_domains=None):
    cfg = tiny_config(root, method, rounds=1)
    return replace(cfg, data=replace(cfg.data, protocol=protocol, train_domains=train_domains,
                                     test_domains=["viC"]))


@pytest.mark.parametrize("protocol, method, train, clients", [
    ("ci", "fedavg", ["viA"], ["viA/c0", "viA/c1", "viA/c2", "viA/c3"]),  # the cameras of one entity
    ("ei", "fedavg", None, ["viA", "viB"]),
    ("es", "centralized", None, ["central"]),
])
def test_protocols_train_end_to_end(tiny_vi, tmp_path, protocol, method, train, clients):
    cfg = vi_config(tiny_vi, protocol, method, train)
    fed = federation_for_config(cfg)
    assert fed.protocol == protocol and [t.name for t in fed.unseen] == ["viC"]
    engine = FederatedEngine(cfg, fed, tmp_path, progress=False, build=build_run)
    assert [c.name for c in engine.clients] == clients
    summary = engine.run()
    assert set(summary["global_unseen_per_testset"]) == {"viC"}
    assert set(summary["global_seen_per_testset"]) == set(train or ["viA", "viB"])
    unseen = summary["global_unseen"]
    assert 0.0 <= unseen["rank1"] <= unseen["rank10"] <= 1.0 and 0.0 < unseen["mAP"] <= 1.0
    # the checkpoint's model evaluates infrared queries against the visible gallery of the unseen entity
    model = load_model(tmp_path / "ckpt.pt")
    again = evaluate_model(model, fed.unseen[0], height=32, width=16)
    assert again["mAP"] == pytest.approx(unseen["mAP"], abs=1e-6)


def test_model_evaluates_video_tracklets(tmp_path):
    video = generate_synthetic_vi(tmp_path / "video", replace(TINY_VI, video=True, frames_per_tracklet=3,
                                                               shots_per_id_per_cam=1))
    fed = build_federation([str(video)], protocol="ei", test_domains=["vidC"])
    assert [c.name for c in fed.clients] == ["vidA", "vidB"] and fed.clients[0].tracklets
    model = build_model(arch="resnet18", feat_dim=32).eval()
    res = evaluate_model(model, fed.unseen[0], height=32, width=16)
    assert 0 < res["num_valid_queries"] <= len(fed.unseen[0].query) and 0.0 < res["mAP"] <= 1.0


def test_embedded_synth_vi_holds_out_its_last_entity():
    fed = build_federation(["synth-vi"], protocol="ei")
    assert [c.name for c in fed.clients] == ["viA", "viB"] and [t.name for t in fed.unseen] == ["viC"]
    assert fed.unseen[0].modality is not None


def test_local_evaluation_ranks_the_federations_vi_and_video_test_sets(tiny_vi, tmp_path, monkeypatch):
    """Per-client evaluation uses the domain's own seen test set (modality map, tracklets), not a bare copy."""
    cfg = vi_config(tiny_vi, "ei", "standalone")  # standalone: local evaluation only
    fed = federation_for_config(cfg)
    engine = FederatedEngine(cfg, fed, tmp_path / "vi", progress=False, build=build_run)
    evaluated, original = [], engine._eval
    monkeypatch.setattr(engine, "_eval", lambda ts: evaluated.append(ts) or original(ts))
    summary = engine.run()
    assert [ts.name for ts in evaluated] == ["viA", "viC", "viB", "viC"]
    assert evaluated[0] is fed.seen[0] and evaluated[2] is fed.seen[1] and evaluated[0].modality is not None
    assert set(summary["local_seen_per_testset"]) == {"viA@viA", "viB@viB"}

    # video clients hold no query/gallery of their own: their seen split is the federation's tracklet test set
    video = generate_synthetic_vi(tmp_path / "video", replace(TINY_VI, video=True, frames_per_tracklet=3,
                                                               shots_per_id_per_cam=1))
    base = tiny_config(video, "fedavg", rounds=1)
    cfg = replace(base, data=replace(base.data, protocol="ei", test_domains=["vidC"]))
    fed = federation_for_config(cfg)
    engine = FederatedEngine(cfg, fed, tmp_path / "video_run", progress=False, build=build_run)
    engine.out_dir.mkdir()
    client = fed.clients[0]
    assert client.query == [] and fed.seen[0].tracklets is not None
    engine._eval_local(1, client)
    [rec] = engine.metrics
    assert (rec["scope"], rec["client"], rec["split"], rec["testset"]) == ("local", "vidA", "seen", "vidA")
    expected = evaluate_model(engine.model, fed.seen[0], height=32, width=16)
    assert rec["mAP"] == pytest.approx(expected["mAP"], abs=1e-6) and rec["num_valid_queries"] > 0
