"""privreid on Flower without processes: the real ServerApp and ClientApp code over a one-process Grid.

Messages go through flwr 1.41's own serialisation (:mod:`privreid.flower.loopback`).
The deployment (SuperLink + SuperNodes on 127.0.0.1) is in test_flower_deployment.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.config import parse_config_args
from flwr.supercore.task_identity import TaskIdentity
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint, load_model
from privreid.cli import app
from privreid.data.catalog import federation_for_config
from privreid.errors import ConfigError, DataError
from privreid.federated.engine import FederatedEngine
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.flower.client_app import app as client_app
from privreid.flower.deployment import node_config_arg, write_app
from privreid.flower.loopback import LoopbackGrid, _wire
from privreid.flower.messages import (SITE, UPLOAD, FlowerRunError, check_reply, record_to_state, scalar_metrics,
                                      state_to_record)
from privreid.flower.server_app import ServerSettings, check_flower_support, run_server
from privreid.flower.site import Site, SiteState

from conftest import tiny_config
from privreid.composition import build_run

A, B = 11, 22  # node ids of the two simulated SuperNodes


def sites(root, tmp):
    return {A: {"data": str(root / "synthA"), "state-dir": str(tmp / "state-A")},
            B: {"data": str(root / "synthB"), "state-dir": str(tmp / "state-B")}}


def flower_run(cfg, root, tmp, out, *, grid=None, **settings):
    grid = grid or LoopbackGrid(client_app, sites(root, tmp))
    summary = run_server(grid, ServerSettings(cfg, out, poll=0.0, **settings), log=lambda msg: None)
    return grid, summary


@pytest.fixture(scope="module")
def runs(tiny_synth, tmp_path_factory):
    """The same 2-round fedpav run in-process and on Flower (loopback); evaluated after round 2 only."""
    tmp = tmp_path_factory.mktemp("flower")
    cfg = tiny_config(tiny_synth, rounds=2, every=2)
    inproc = FederatedEngine(cfg, federation_for_config(cfg), tmp / "inproc", progress=False, build=build_run).run()
    grid, flower = flower_run(cfg, tiny_synth, tmp, tmp / "flower")
    return dict(cfg=cfg, tmp=tmp, grid=grid, inproc=inproc, flower=flower,
                a=load_checkpoint(tmp / "inproc" / "ckpt.pt"), b=load_checkpoint(tmp / "flower" / "ckpt.pt"))


# ----------------------------------------------------------------------------- equivalence
def test_flower_equals_in_process_fedpav(runs):
    a, b = runs["a"], runs["b"]
    assert set(a["global_state"]) == set(b["global_state"])
    for key, value in a["global_state"].items():  # same seed, same code: bit-identical
        assert value.dtype == b["global_state"][key].dtype
        assert torch.equal(value, b["global_state"][key]), key
    assert a["metrics"] == b["metrics"]  # train, local and global (seen on the sites, unseen here) records
    assert a["comm"][0] == b["comm"][0] and a["comm"][1].items() <= b["comm"][1].items()
    drop = {"wall_time_s", "checkpoint", "runtime", "comm_bytes_down_eval"}
    assert {k: v for k, v in runs["flower"].items() if k not in drop} == \
        {k: v for k, v in runs["inproc"].items() if k not in drop}
    assert runs["flower"]["runtime"] == "flower"
    assert runs["flower"]["comm_bytes_down_eval"] == b["comm"][1]["bytes_down_eval"] > 0
    # the outputs are the usual ones and the shared loader takes them unchanged
    out = runs["tmp"] / "flower"
    assert {p.name for p in out.iterdir()} >= {"ckpt.pt", "metrics.jsonl", "summary.json"}
    assert [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()] == a["metrics"]
    model = load_model(out / "ckpt.pt")
    assert torch.equal(model.state_dict()["neck.fc.weight"], a["global_state"]["neck.fc.weight"])
    # the server never holds a site's local keys
    assert b["client_states"] == {} and b["client_classes"] == {"synthA": 6, "synthB": 6}


def test_every_message_the_server_receives_holds_only_shared_parameters_and_scalars(runs):
    grid = runs["grid"]
    engine_model = load_model(runs["tmp"] / "flower" / "ckpt.pt")
    shared = CLASSIFIER_LOCAL.shared(engine_model.state_dict())
    kinds = [m.metadata.message_type for m in grid.received]
    assert kinds.count("query") == 2 and kinds.count("train") == 4 and kinds.count("evaluate") == 2
    for msg in grid.received:
        content = msg.content
        for name, record in content.array_records.items():
            assert msg.metadata.message_type == "train" and name == UPLOAD
            assert set(record) == set(shared)  # no classifier, nothing else
            for key, array in record.items():
                assert tuple(array.shape) == tuple(shared[key].shape)
        for record in content.metric_records.values():
            assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in record.values())
        for name, record in content.config_records.items():  # only a site's self-description
            assert msg.metadata.message_type == "query" and name == SITE
            assert set(record) == {"name", "domain", "source_pids"}
    # images never travel: everything received is far smaller than the sites' pixel data
    assert grid.bytes_up < 4 * 2 * sum(v.numel() * 4 for v in shared.values()) + 10**6


# ----------------------------------------------------------------------------- faults
def drop_at(node, round_no, kind="train"):
    return lambda n, m: n == node and m.metadata.message_type == kind and m.metadata.group_id == str(round_no)


def test_site_lost_mid_round_is_dropped_when_min_clients_allows(runs, tiny_synth, tmp_path):
    grid = LoopbackGrid(client_app, sites(tiny_synth, tmp_path), drop=drop_at(B, 2))
    _, summary = flower_run(runs["cfg"], tiny_synth, tmp_path, tmp_path / "out", grid=grid, min_clients=1)
    ckpt = load_checkpoint(tmp_path / "out" / "ckpt.pt")
    assert ckpt["round"] == 2
    trained = [(m["round"], m["client"]) for m in ckpt["metrics"] if m["scope"] == "train"]
    assert trained == [(1, "synthA"), (1, "synthB"), (2, "synthA")]
    assert ckpt["comm"][1]["bytes_up"] == ckpt["comm"][0]["bytes_up"] // 2  # one upload in round 2
    # round 2's global model is synthA's upload alone: it differs from the two-site aggregate
    assert not torch.equal(ckpt["global_state"]["neck.fc.weight"], runs["b"]["global_state"]["neck.fc.weight"])
    assert summary["evaluated_round"] == 2 and "global_seen_per_testset" in summary


def test_site_lost_without_slack_stops_cleanly_and_resume_equals_uninterrupted(runs, tiny_synth, tmp_path):
    out = tmp_path / "out"
    grid = LoopbackGrid(client_app, sites(tiny_synth, tmp_path), drop=drop_at(B, 2))
    with pytest.raises(FlowerRunError, match=r"round 2: 1 of 2 selected sites uploaded.*synthB.*--resume"):
        flower_run(runs["cfg"], tiny_synth, tmp_path, out, grid=grid)
    ckpt = load_checkpoint(out / "ckpt.pt")  # the last good checkpoint is intact and loadable
    assert ckpt["round"] == 1
    load_model(ckpt)
    # synthA trained round 2 before the stop; on resume (a new run) it must start round 2 from its round-1
    # state again (its state dir holds both versions)
    flower_run(runs["cfg"], tiny_synth, tmp_path, out, resume=True)
    resumed = load_checkpoint(out / "ckpt.pt")
    for key, value in runs["a"]["global_state"].items():
        assert torch.equal(value, resumed["global_state"][key]), key
    assert resumed["metrics"] == runs["a"]["metrics"]


def test_site_whose_context_push_failed_evaluates_its_current_personalised_model(runs, tiny_synth, tmp_path):
    """flwr 1.41 stores a ClientApp's Context from its last request, sent after the reply (one try, at exit); on
    the deployment the SuperNode had not stored the round-2 training's Context when the evaluate message started,
    and the site scored its round-1 personalised model (fedpav: the trained model kept in memory) instead of
    its current one."""
    grid = LoopbackGrid(client_app, sites(tiny_synth, tmp_path), lose_context=drop_at(A, 2))
    flower_run(runs["cfg"], tiny_synth, tmp_path, tmp_path / "out", grid=grid)
    ckpt = load_checkpoint(tmp_path / "out" / "ckpt.pt")
    assert [m for m in ckpt["metrics"] if m["scope"] == "local"] == \
        [m for m in runs["a"]["metrics"] if m["scope"] == "local"] != []
    assert ckpt["metrics"] == runs["a"]["metrics"]
    assert not [c for c in grid.contexts.values() if c.state.array_records]  # no model state in a Context


# ----------------------------------------------------------------------------- messages and the privacy gate
def test_state_round_trip_through_flower_messages_is_exact():
    state = {"w": torch.randn(3, 4), "n": torch.tensor(7, dtype=torch.int64), "d": torch.randn(2, dtype=torch.float64)}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 0
    msg = Message(RecordDict({"s": state_to_record(state)}), 5, "train")
    msg.metadata.__dict__["_message_id"] = "x"
    back = record_to_state(_wire(msg)[0].content.array_records["s"])
    assert list(back) == list(state)
    for key in state:
        assert back[key].dtype == state[key].dtype and torch.equal(back[key], state[key])
    with pytest.raises(FlowerRunError, match="bfloat16"):
        state_to_record({"b": torch.zeros(2, dtype=torch.bfloat16)})


def test_scalar_metrics_accepts_numbers_only():
    record = scalar_metrics({"loss": 0.5, "steps": 3, "np": np.float32(0.25), "t": torch.tensor(2.0)})
    assert dict(record) == {"loss": 0.5, "steps": 3, "np": 0.25, "t": 2.0}
    for bad in ({"f": [0.1, 0.2]}, {"f": torch.ones(3)}, {"f": "high"}, {"f": True}):
        with pytest.raises(FlowerRunError, match="not a scalar"):
            scalar_metrics(bad)


def _reply(content, kind="train"):
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 0
    ask = Message(RecordDict(), 5, kind)
    ask.metadata.__dict__["_message_id"] = "ask"
    return Message(content, reply_to=ask)


def test_privacy_gate_refuses_anything_beyond_shared_parameters_and_scalars():
    shapes, model_keys = {"w": (2, 2)}, {"w", "classifier.weight"}
    ok = {UPLOAD: ArrayRecord({"w": Array(np.zeros((2, 2), np.float32))}), "train": MetricRecord({"loss": 1.0})}
    check_reply(_reply(RecordDict(ok)), kind="train", shared_shapes=shapes, model_keys=model_keys)
    extra_vector = ArrayRecord({"w": Array(np.zeros((2, 2), np.float32)), "mrb/x/3": Array(np.zeros(4, np.float32))})
    check_reply(_reply(RecordDict({UPLOAD: extra_vector})), kind="train", shared_shapes=shapes, model_keys=model_keys)
    bad = {
        "local-only key": {UPLOAD: ArrayRecord({"w": Array(np.zeros((2, 2), np.float32)),
                                                "classifier.weight": Array(np.zeros((3, 2), np.float32))})},
        "missing": {UPLOAD: ArrayRecord({})},
        "shape": {UPLOAD: ArrayRecord({"w": Array(np.zeros((2, 3), np.float32))})},
        "matrix": {UPLOAD: ArrayRecord({"w": Array(np.zeros((2, 2), np.float32)),
                                        "features": Array(np.zeros((8, 4), np.float32))})},
        "non-scalar": {**ok, "train": MetricRecord({"per_sample": [0.1, 0.2]})},
        "config": {**ok, "notes": ConfigRecord({"path": "/data/img.jpg"})},
        "other record": {**ok, "images": ArrayRecord({"w": Array(np.zeros((2, 2), np.float32))})},
        "no upload": {"train": MetricRecord({"loss": 1.0})},
    }
    for why, content in bad.items():
        with pytest.raises(FlowerRunError):
            check_reply(_reply(RecordDict(content)), kind="train", shared_shapes=shapes, model_keys=model_keys)
    with pytest.raises(FlowerRunError, match="parameter record"):  # an evaluate reply carries metrics only
        check_reply(_reply(RecordDict(ok), "evaluate"), kind="evaluate", shared_shapes=shapes, model_keys=model_keys)


# ----------------------------------------------------------------------------- methods, sites, settings
@pytest.mark.parametrize("method,opts,why", [
    ("centralized", {}, "needs all the data in one place"),
    ("standalone", {}, "never communicate"),
    ("fedbn", {}, "local layers"),
    ("ska", {"dual": False}, "local layers"),
])
def test_methods_that_cannot_run_on_flower_say_why(tiny_synth, method, opts, why):
    with pytest.raises(ConfigError, match=f"cannot run on Flower: .*{why}"):
        check_flower_support(tiny_config(tiny_synth, method=method, method_options=opts))
    for ok in ("fedpav", "fedreid", "ska", "fedpav-cdw"):
        check_flower_support(tiny_config(tiny_synth, method=ok))
    # DPPT's shared classifier needs the federation's global identity labels in one place
    with pytest.raises(ConfigError, match="cannot run on Flower: .*shared_classifier=false"):
        check_flower_support(tiny_config(tiny_synth, method="dppt"))
    check_flower_support(tiny_config(tiny_synth, method="dppt", method_options={"shared_classifier": False}))


def test_site_is_one_dataset_and_its_client_matches_the_in_process_one(tiny_synth, tmp_path):
    with pytest.raises(DataError, match="exactly one dataset"):
        Site.load(str(tiny_synth))
    with pytest.raises(DataError, match="no dataset"):
        Site.from_node_config({})
    site = Site.load(str(tiny_synth / "synthA"), state_dir=tmp_path)
    fed = federation_for_config(tiny_config(tiny_synth))
    assert site.client == fed.clients[0] and site.federation.seen[0] == fed.seen[0]
    assert Site.load(str(tiny_synth / "synthA"), name="hospital-1").client.name == "hospital-1"
    # DIR:FORMAT, as `privreid train --data` takes it (issue 25)
    named = Site.load(f"{tiny_synth / 'synthA'}:market1501", state_dir=tmp_path)
    assert named.client.num_samples == site.client.num_samples


def test_site_state_keeps_two_versions_per_run_in_the_state_dir(tiny_synth, tmp_path):
    site = Site.load(str(tiny_synth / "synthA"), state_dir=tmp_path)
    store = SiteState(site, "key1")
    assert store.load(0) is None
    for done in (1, 2, 3):
        store.save(done, {"classifier.weight": torch.full((2,), float(done))}, {"step": done})
    # versions 2 and 3 are kept; training round r starts from the newest version <= r
    assert store.load(2)[1] == {"step": 2} and store.load(3)[1] == {"step": 3} and store.load(1) is None
    local, memory = SiteState(site, "key1").load(5)  # a later ClientApp process, or a resumed run: the file
    assert torch.equal(local["classifier.weight"], torch.full((2,), 3.0)) and memory == {"step": 3}
    assert SiteState(site, "other-run").load(5) is None  # another run's state is never used
    assert [p.name for p in tmp_path.iterdir()] == ["synthA-key1.pt"]


def test_a_sites_state_flipped_or_swapped_is_refused_naming_the_file(tiny_synth, tmp_path):
    """A site's memory lives in its state file: a flipped byte, or another client's file copied over it, is
    refused in one line naming the file, never trained on (issue 39)."""
    import shutil

    from privreid.errors import CheckpointError

    site = Site.load(str(tiny_synth / "synthA"), state_dir=tmp_path / "a")
    other = Site.load(str(tiny_synth / "synthB"), state_dir=tmp_path / "b")
    SiteState(site, "key1").save(1, {"classifier.weight": torch.arange(64.0)}, {"step": 1})
    SiteState(other, "key1").save(1, {"classifier.weight": torch.zeros(64)}, {"step": 1})
    path = tmp_path / "a" / "synthA-key1.pt"
    good = path.read_bytes()
    raw = bytearray(good)
    raw[bytes(raw).index(torch.arange(64.0).numpy().tobytes()[40:80]) + 3] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=f"this site's state {path} is not the one it wrote for client synthA"):
        SiteState(site, "key1").load(1)
    shutil.copyfile(tmp_path / "b" / "synthB-key1.pt", path)
    with pytest.raises(CheckpointError, match="another client's file"):
        SiteState(site, "key1").load(1)
    path.write_bytes(good)
    assert SiteState(site, "key1").load(1)[1] == {"step": 1}


def test_run_settings_round_trip_and_app_files(tiny_synth, tmp_path):
    settings = ServerSettings(tiny_config(tiny_synth), tmp_path / "out", sites=3, min_clients=2, round_timeout=5.5)
    back = ServerSettings.from_run_config(settings.to_run_config())
    assert back == settings
    from flwr.common.config import validate_config
    import tomli
    pyproject = tomli.loads((write_app(tmp_path / "app", settings) / "pyproject.toml").read_text())
    valid, errors, _ = validate_config(pyproject, check_module=True)
    assert valid, errors
    values = {"data": "/data/my site", "name": 'a "b"', "format": "it's", "win": r"C:\data\x", "state-dir": None}
    assert parse_config_args([node_config_arg(values)]) == {k: v for k, v in values.items() if v is not None}
    with pytest.raises(ConfigError, match="both"):
        node_config_arg({"name": """a'b"c"""})
    with pytest.raises(ConfigError, match="--min-clients"):
        ServerSettings(tiny_config(tiny_synth), tmp_path, min_clients=-1).validate()


# ----------------------------------------------------------------------------- command line
@pytest.mark.parametrize("args,message", [
    (["flower", "superlink"], "--insecure"),
    (["flower", "superlink", "--insecure", "--ssl-certfile", "x.pem"], "excludes"),
    (["flower", "supernode", "--data", "/nonexistent", "--insecure"], "not found"),
    (["flower", "supernode", "--data", "/nonexistent"], "--root-certificates"),
    (["flower", "run", "--method", "centralized", "--insecure"], "cannot run on Flower"),
    (["flower", "run", "--method", "fedpav"], "--root-certificates"),
    (["flower", "run", "--insecure", "--set", "optim.nope=1"], "optim has no field 'nope'"),
    (["flower", "run", "--insecure", "--set", "federation.rounds=0"], "rounds must be > 0"),
])
def test_flower_commands_fail_clearly_before_starting_anything(args, message, tmp_path):
    result = CliRunner().invoke(app, args + (["--out", str(tmp_path / "o")] if args[1] == "run" else []))
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


# ----------------------------------------------------------------------------- every supported method
@pytest.mark.slow
@pytest.mark.parametrize("method,train", [
    ("fedreid", {}),  # C = 0.5: one site per round
    ("ska", {}),  # local norms, generalised norms shared
    ("fedpav-cdw", {}),  # public-set probe on the sites
    ("fedpav-cc", {}),  # cluster models: per-client server state, transmitted by configure
    ("dppt", {"method_options": {"shared_classifier": False}}),  # class centres beside the parameters, both ways
    ("fedpav", {"dp_sgd": True, "noise_multiplier": 1.0, "max_grad_norm": 1.0}),  # accountant on the sites
    ("fedpav", {"client_dp": True, "clip": 10.0, "noise_multiplier": 0.001}),
    ("fedpav", {"beta": 0.01, "beta_mode": "upload"}),
    ("fedreid", {"beta": 0.01, "beta_mode": "download"}),  # Eq. 15 noise drawn on the site, as in-process
])
def test_each_supported_method_gives_the_in_process_result_on_flower(tiny_synth, tmp_path, method, train):
    cfg = tiny_config(tiny_synth, method=method, rounds=2, every=2, **train)
    FederatedEngine(cfg, federation_for_config(cfg), tmp_path / "inproc", progress=False, build=build_run).run()
    flower_run(cfg, tiny_synth, tmp_path, tmp_path / "flower")
    a, b = load_checkpoint(tmp_path / "inproc" / "ckpt.pt"), load_checkpoint(tmp_path / "flower" / "ckpt.pt")
    for key, value in a["global_state"].items():
        assert torch.equal(value, b["global_state"][key]), key
    assert a["metrics"] == b["metrics"]  # DP runs: the epsilon records too
    assert a["server_client_state"].keys() == b["server_client_state"].keys()
