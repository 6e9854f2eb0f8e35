"""The federated engine on a tiny synthetic federation (seconds per run)."""

import json

import pytest
import torch

from privreid.checkpoint import Checkpoint, load_checkpoint
from privreid.data.catalog import build_federation
from privreid.errors import CheckpointError, ConfigError
from privreid.federated.engine import FederatedEngine, selection_size
from privreid.rundir import prepare_out_dir
from privreid.federated.policy import CLASSIFIER_LOCAL, state_nbytes
from privreid.federated.strategy import DataVolumeAverage

from conftest import kill_in_round, spy_on_uploads, tiny_config
from privreid.composition import build_run


def federation(cfg):
    d = cfg.data
    return build_federation(d.roots, test_domains=d.test_domains)


def test_fedpav_server_sees_only_shared_parameters_and_scalars(tiny_synth, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_synth, rounds=2)
    seen_uploads = spy_on_uploads(monkeypatch, DataVolumeAverage)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    summary = engine.run()

    shared_keys = set(CLASSIFIER_LOCAL.shared(engine.model.state_dict()))
    assert len(seen_uploads) == 2 and all(len(u) == 2 for u in seen_uploads)  # synthA, synthB
    for uploads in seen_uploads:
        for u in uploads:
            assert set(u.state) == shared_keys  # no classifier, nothing else
            assert not any(k.startswith("classifier.") for k in u.state)
            assert all(isinstance(v, float) for v in u.metrics.values())  # scalars only
            assert isinstance(u.num_samples, int)
    # communication: each selected client downloads and uploads the shared state
    per_model = state_nbytes(CLASSIFIER_LOCAL.shared(engine.model.state_dict()))
    assert summary["comm_bytes_up"] == summary["comm_bytes_down"] == 2 * 2 * per_model
    assert set(summary["global_seen_per_testset"]) == {"synthA", "synthB"}
    assert set(summary["global_unseen_per_testset"]) == {"synthC"}


def test_global_model_is_data_volume_average_of_uploads(tiny_synth, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_synth, rounds=1)
    rounds = spy_on_uploads(monkeypatch, DataVolumeAverage)
    FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run).run()
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    ups = rounds[-1]
    n = sum(u.num_samples for u in ups)
    key = "neck.fc.weight"
    expected = sum(u.state[key].double() * u.num_samples / n for u in ups).float()
    assert torch.allclose(ckpt["global_state"][key], expected, atol=1e-6)
    # client-local heads are stored per client with their own sizes, never in the global state
    assert set(ckpt["client_states"]) == {"synthA", "synthB"}
    assert all(set(s) == {"classifier.weight"} for s in ckpt["client_states"].values())
    assert not any(k.startswith("classifier.") for k in ckpt["global_state"])
    assert ckpt["client_classes"] == {"synthA": 6, "synthB": 6}


def test_client_fraction_samples_per_round(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=3, client_fraction=0.5)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    picks = [tuple(c.name for c in engine.select_clients(r)) for r in range(20)]
    assert all(len(p) == 1 for p in picks)
    assert set(picks) == {("synthA",), ("synthB",)}  # both get picked over 20 rounds
    assert picks == [tuple(c.name for c in engine.select_clients(r)) for r in range(20)]  # deterministic


@pytest.mark.parametrize("fraction,n,expected", [
    (0.5, 9, 5),  # round(4.5) = 4 (banker's rounding); Eq. 5 of paper 002: ceil = 5
    (0.5, 5, 3),  # round(2.5) = 2
    (0.75, 6, 5),  # round(4.5) = 4
    (0.3, 10, 3),  # 0.3 * 10 = 3.0000000000000004 in floats: still 3
    (0.1, 3, 1), (0.01, 4, 1), (1.0, 7, 7), (0.34, 3, 2)])
def test_selection_size_is_the_ceiling_of_c_n(fraction, n, expected):
    assert selection_size(fraction, n) == expected


def test_engine_selects_ceil_c_n_clients(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=1, client_fraction=0.75)
    fed = build_federation(cfg.data.roots, protocol="by-camera", test_domains=cfg.data.test_domains)
    engine = FederatedEngine(cfg, fed, tmp_path, progress=False, build=build_run)
    assert len(engine.clients) == 6
    assert engine.clients_per_round() == 5 and all(len(engine.select_clients(r)) == 5 for r in range(4))


def run_metrics(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_resume_after_crash_equals_uninterrupted_run(tiny_synth, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_synth, rounds=3)
    fed = federation(cfg)
    FederatedEngine(cfg, fed, tmp_path / "full", progress=False, build=build_run).run()
    kill_in_round(monkeypatch, FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run), 3)
    FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run).run(resume=True)
    full, cut = run_metrics(tmp_path / "full"), run_metrics(tmp_path / "cut")
    assert full == cut
    a = load_checkpoint(tmp_path / "full" / "ckpt.pt")["global_state"]
    b = load_checkpoint(tmp_path / "cut" / "ckpt.pt")["global_state"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_refuses_a_different_configuration(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=1)
    FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run).run()
    other = tiny_config(tiny_synth, rounds=2, batch_size=4)
    with pytest.raises(ConfigError, match="optim.batch_size"):
        FederatedEngine(other, federation(other), tmp_path, progress=False, build=build_run).run(resume=True)


def test_out_dir_guard(tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(b"x")
    with pytest.raises(ConfigError, match="already holds a run"):
        prepare_out_dir(tmp_path, overwrite=False, resume=False)
    prepare_out_dir(tmp_path, overwrite=True, resume=False)
    assert not (tmp_path / "ckpt.pt").exists()
    with pytest.raises(ConfigError, match="no checkpoint"):
        prepare_out_dir(tmp_path, overwrite=False, resume=True)


def test_centralized_pools_clients_and_does_not_communicate(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, method="centralized", rounds=1)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    assert [c.name for c in engine.clients] == ["central"]
    assert engine.clients[0].num_classes == 12  # 6 + 6 identities, kept apart
    summary = engine.run()
    assert summary["comm_bytes_up"] == 0
    assert "global_unseen" in summary


def test_standalone_has_no_global_model_and_evaluates_clients(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, method="standalone", rounds=1)
    summary = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run).run()
    assert "global_seen" not in summary
    assert set(summary["local_unseen_per_testset"]) == {"synthA@synthC", "synthB@synthC"}
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt["global_state"] == {}
    assert "backbone.conv1.weight" in ckpt["client_states"]["synthA"]
    typed = Checkpoint.load(tmp_path / "ckpt.pt")
    assert typed.has_global_model is False and typed.shared_keys == frozenset()
    assert typed.clients == typed.trained_clients == ["synthA", "synthB"]
    with pytest.raises(CheckpointError, match="has no global model"):
        typed.load_model()


# ----------------------------------------------------------------------------- personalised models
def _local_records(ckpt, round_no):
    return {(m["client"], m["testset"]): m for m in ckpt["metrics"] if m["scope"] == "local" and m["round"] == round_no}


@pytest.mark.parametrize("method,train", [
    ("fedpav", {}),  # the trained local model (paper 004 Sec. 4.1)
    ("ska", {}),  # the LS model after SelectUpdate (paper 000 Alg. 1)
    ("fedreid", {"seed": 2}),  # C = 0.5: one client trained in round 1, the other scored all the same
    ("fedavg", {}),
    ("fedbn", {}),
    ("fedprox", {}),
    ("moon", {}),
    ("fedarks", {}),
    ("dppt", {}),
    ("fedpav-cc", {}),
    ("standalone", {}),
])
def test_every_client_is_scored_and_load_model_returns_the_scored_model(tiny_synth, tmp_path, method, train):
    from privreid.checkpoint import load_model
    from privreid.evaluation.metric_registry import summary_keys
    from privreid.evaluation.model_eval import evaluate_model

    cfg = tiny_config(tiny_synth, method=method, rounds=1, **train)
    fed = federation(cfg)
    engine = FederatedEngine(cfg, fed, tmp_path, progress=False, build=build_run)
    engine.run()
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    records = _local_records(ckpt, 1)
    assert {c for c, _ in records} == {c.name for c in engine.clients}  # trained this round or not
    x = torch.rand(3, 3, 32, 16)
    for client in engine.clients:
        model = load_model(ckpt, client=client.name)
        engine._load_personal(client)  # the model the engine scored
        engine.model.eval()
        with torch.no_grad():
            assert torch.equal(model(x), engine.model(x)), client.name
        seen = next(ts for ts in fed.seen if ts.name == client.domain)
        res = evaluate_model(model, seen, height=32, width=16)  # what `privreid eval --client` computes
        assert {k: res[k] for k in summary_keys()} == {k: records[client.name, seen.name][k] for k in summary_keys()}


def test_server_streams_uploads_holding_none_once_folded(tiny_synth, tmp_path):
    """Each upload is folded into the round's running sum as it arrives and dropped (issue 14, part 1)."""
    import gc
    import weakref

    class Watch(FederatedEngine):
        alive_at_arrival: list = []

        def receive(self, inbox, upload):
            gc.collect()
            self.alive_at_arrival.append(sum(r() is not None for r in self.refs))
            self.refs = [weakref.ref(v) for v in upload.state.values()]
            super().receive(inbox, upload)

    cfg = tiny_config(tiny_synth, rounds=1)
    engine = Watch(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    engine.refs = []
    engine.run()
    assert engine.alive_at_arrival == [0, 0]  # the first upload was gone when the second arrived
    gc.collect()
    assert all(r() is None for r in engine.refs)
    assert engine.comm[0]["bytes_up"] == 2 * state_nbytes(CLASSIFIER_LOCAL.shared(engine.model.state_dict()))
