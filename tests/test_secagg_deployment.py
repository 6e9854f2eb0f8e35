"""Secure aggregation on a real Flower deployment: a SuperLink and three SuperNodes on 127.0.0.1 (insecure).

Slow (every SecAgg+ stage is a message, and each starts a ``flwr-clientapp``
process on a SuperNode polling every 3 s).  The dropout recovery and the
privacy gate are tested on the loopback Grid in test_secagg.py.
"""

from __future__ import annotations

import pytest
import torch

from privreid.checkpoint import load_checkpoint
from privreid.data.catalog import federation_for_config
from privreid.federated.engine import FederatedEngine
from privreid.flower.deployment import LocalDeployment
from privreid.flower.server_app import ServerSettings

from conftest import TINY_SYNTH, tiny_config
from privreid.composition import build_run

pytestmark = pytest.mark.slow


def test_secaggplus_deployment_gives_the_in_process_secure_model_exactly(tmp_path, monkeypatch):
    from privreid.data.synthetic import SynthConfig, generate_synthetic

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the sites train with one thread, as this process does

    root = generate_synthetic(tmp_path / "synth", SynthConfig(**{**TINY_SYNTH, "num_domains": 4}))
    cfg = tiny_config(root, rounds=1, max_steps_per_epoch=1, secure_aggregation=True)
    cfg.data.test_domains = ["synthD"]
    plain_cfg = tiny_config(root, rounds=1, max_steps_per_epoch=1)
    plain_cfg.data.test_domains = ["synthD"]
    FederatedEngine(plain_cfg, federation_for_config(plain_cfg), tmp_path / "plain", progress=False, build=build_run).run()
    FederatedEngine(cfg, federation_for_config(cfg), tmp_path / "in-process", progress=False, build=build_run).run()
    sites = {k: {"data": str(root / f"synth{k}"), "state-dir": str(tmp_path / f"state-{k}")} for k in "ABC"}
    with LocalDeployment(sites, tmp_path / "dep") as dep:
        record = dep.run(ServerSettings(cfg, tmp_path / "flower", sites=3), timeout=480)
    assert record["status"] == "finished:completed"
    flower, plain = load_checkpoint(tmp_path / "flower" / "ckpt.pt"), load_checkpoint(tmp_path / "plain" / "ckpt.pt")
    (rec,) = [r for r in flower["metrics"] if r["scope"] == "secagg"]
    assert rec["runtime"] == "flower" and rec["clients"] == 3 and rec["saturated"] == 0
    worst = max((flower["global_state"][k].double() - plain["global_state"][k].double()).abs().max().item()
                for k in plain["global_state"] if plain["global_state"][k].is_floating_point())
    assert 0 < worst <= rec["quantisation_error_bound"] + 1e-5  # secure vs plain: the quantisation
    # Flower's SecAgg+ on three SuperNode processes vs in-process SecAgg+: the same protocol seed and stochastic
    # rounding per site, exact integer sums, the same dequantisation: bit-identical models
    inproc = load_checkpoint(tmp_path / "in-process" / "ckpt.pt")
    assert flower["global_state"].keys() == inproc["global_state"].keys()
    differ = {k: (int((flower["global_state"][k] != v).sum()), v.numel(),
                  float((flower["global_state"][k].double() - v.double()).abs().max()))
              for k, v in inproc["global_state"].items() if not torch.equal(flower["global_state"][k], v)}
    assert not differ, differ


def test_secaggplus_deployment_recovers_a_supernode_killed_mid_round(tmp_path, monkeypatch):
    """Site C's SuperNode is killed once it holds SecAgg+ state (it has answered setup): the round goes on with
    A and B, and the protocol, not a restart of the round, gives their sum."""
    from privreid.data.synthetic import SynthConfig, generate_synthetic

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    root = generate_synthetic(tmp_path / "synth", SynthConfig(**{**TINY_SYNTH, "num_domains": 4}))
    cfg = tiny_config(root, rounds=1, max_steps_per_epoch=1, secure_aggregation=True)
    cfg.data.test_domains = ["synthD"]
    sites = {k: {"data": str(root / f"synth{k}"), "state-dir": str(tmp_path / f"state-{k}")} for k in "ABC"}
    with LocalDeployment(sites, tmp_path / "dep") as dep:
        def kill_c_once_it_holds_secaggplus_state():
            if "site:C" in dep.procs and any((tmp_path / "state-C").rglob("secaggplus-*.bin")):
                dep.kill_site("C")

        record = dep.run(ServerSettings(cfg, tmp_path / "flower", sites=3, min_clients=2, round_timeout=30),
                         timeout=480, poll=0.2, on_poll=kill_c_once_it_holds_secaggplus_state)
        assert "site:C" not in dep.procs  # it was killed mid-round
    assert record["status"] == "finished:completed"
    ckpt = load_checkpoint(tmp_path / "flower" / "ckpt.pt")
    (rec,) = [r for r in ckpt["metrics"] if r["scope"] == "secagg"]
    assert ckpt["round"] == 1 and rec["clients"] == 2 and "synthC" in rec["dropped"]
    assert sorted(m["client"] for m in ckpt["metrics"] if m["scope"] == "train") == ["synthA", "synthB"]
    assert all(torch.isfinite(v).all() for v in ckpt["global_state"].values() if v.is_floating_point())
