"""privreid on a real Flower deployment: a SuperLink and two SuperNodes on 127.0.0.1 (insecure).

Slow: every message starts a ``flwr-clientapp`` process and SuperNodes poll every
3 s, so a 2-round run takes one to three minutes on a busy 2-core machine.  Each
test bounds its runs with a timeout and ends every process it started, by
process-group id (checked against /proc).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from privreid.checkpoint import load_checkpoint, load_model
from privreid.data.catalog import federation_for_config
from privreid.federated.engine import FederatedEngine
from privreid.flower.deployment import LocalDeployment, rounds_done
from privreid.flower.messages import FlowerRunError
from privreid.flower.server_app import ServerSettings

from conftest import tiny_config
from privreid.composition import build_run

pytestmark = pytest.mark.slow
RUN_TIMEOUT = 480


def site_configs(root, tmp):
    return {k: {"data": str(root / f"synth{k}"), "state-dir": str(tmp / f"state-{k}")} for k in "AB"}


def live_group_members(pgid: int) -> list[int]:
    """Processes (not zombies) whose process group is ``pgid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def in_process(cfg, out):
    FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, build=build_run).run()
    return load_checkpoint(out / "ckpt.pt")


def test_deployment_gives_the_in_process_model_and_ends_its_processes(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=2, every=2)
    expected = in_process(cfg, tmp_path / "inproc")
    with LocalDeployment(site_configs(tiny_synth, tmp_path), tmp_path / "dep") as dep:
        groups = [p.pid for p in dep.procs.values()]
        record = dep.run(ServerSettings(cfg, tmp_path / "flower", sites=2), timeout=RUN_TIMEOUT)
    assert record["status"] == "finished:completed"
    assert not [pid for g in groups for pid in live_group_members(g)]  # SuperLink, SuperNodes, their apps
    got = load_checkpoint(tmp_path / "flower" / "ckpt.pt")
    for key, value in expected["global_state"].items():
        assert torch.equal(value, got["global_state"][key]), key
    assert got["metrics"] == expected["metrics"]
    assert record["network-traffic"]["total-bytes"] > got["comm"][0]["bytes_up"]  # the real wire carried it
    load_model(tmp_path / "flower" / "ckpt.pt")


def test_supernode_killed_mid_round_stops_cleanly_then_resume_completes_with_the_rest(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=2, every=2)
    out = tmp_path / "flower"
    with LocalDeployment(site_configs(tiny_synth, tmp_path), tmp_path / "dep") as dep:
        def kill_b_after_round_1():
            if rounds_done(out) >= 1 and "site:B" in dep.procs:
                dep.kill_site("B")

        # every selected site must upload (--min-clients 0): the run stops in round 2
        with pytest.raises(FlowerRunError, match=r"round 2: 1 of 2 selected sites uploaded.*synthB"):
            dep.run(ServerSettings(cfg, out, sites=2, round_timeout=40), timeout=RUN_TIMEOUT, poll=0.5,
                    on_poll=kill_b_after_round_1)
        assert load_checkpoint(out / "ckpt.pt")["round"] == 1  # the last good checkpoint
        load_model(out / "ckpt.pt")

        # --resume with --min-clients 1: round 2 completes with the remaining site
        dep.run(ServerSettings(cfg, out, sites=2, min_clients=1, round_timeout=40, wait_timeout=15, resume=True),
                timeout=RUN_TIMEOUT)
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["round"] == 2
    trained = [(m["round"], m["client"]) for m in ckpt["metrics"] if m["scope"] == "train"]
    assert trained == [(1, "synthA"), (1, "synthB"), (2, "synthA")]
    seen = {m["testset"] for m in ckpt["metrics"] if m["scope"] == "global" and m["split"] == "seen"}
    assert seen == {"synthA"}  # the lost site could not evaluate; the unseen domain is evaluated here
    assert any(m["scope"] == "global" and m["split"] == "unseen" for m in ckpt["metrics"])
