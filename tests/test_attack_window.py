"""The threat model (issue 43, item 4): the attack window ``rounds``, its frequency ``every`` and the per-round
draw of the malicious clients; outside its attack rounds a malicious client uploads what it trained."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import spy_on_uploads, tiny_config
from privreid.composition import build_run
from privreid.data.catalog import federation_for_config
from privreid.federated.engine import FederatedEngine
from privreid.federated.strategy import DataVolumeAverage
from privreid.malicious_clients.threat_model import threat_model
from privreid.seeding import derive_seed

CLIENTS = [SimpleNamespace(name=n) for n in "abcde"]


def _threat(seed=3, **settings):
    """The threat model of ``settings`` in a 10-round run of clients a..e whose last two are malicious."""
    settings = {"malicious": 2, **settings}
    return threat_model(settings, CLIENTS, CLIENTS[3:], 10, seed, "sign-flip", False)


def _attack_rounds(threat):
    return [r + 1 for r in range(10) if threat.malicious_in(r)]


def test_the_window_and_its_frequency_pick_the_attack_rounds():
    assert _attack_rounds(_threat()) == list(range(1, 11))
    assert _attack_rounds(_threat(rounds="2:6", every=2)) == [2, 4, 6]
    assert _attack_rounds(_threat(rounds="8:")) == [8, 9, 10]
    assert _attack_rounds(_threat(rounds=":3", every=3)) == [1]
    assert _threat(rounds="8:").record() == {"rounds": [8, 10], "every": 1, "draw": "fixed"}
    assert _threat(rounds="2:6").malicious_in(4) == {"d", "e"}


def test_a_per_round_draw_takes_k_clients_from_the_run_seed_and_round():
    threat = _threat(draw="per-round")
    draws = [threat.malicious_in(r) for r in range(10)]
    assert all(len(d) == 2 and d <= set("abcde") for d in draws)
    assert len(set(draws)) > 1  # not the same clients every round
    assert draws == [_threat(draw="per-round").malicious_in(r) for r in range(10)]  # reproducible
    assert draws != [_threat(draw="per-round", seed=4).malicious_in(r) for r in range(10)]
    rng = np.random.default_rng(derive_seed(3, "adversary-draw", 6))
    assert draws[6] == {"abcde"[i] for i in rng.choice(5, 2, replace=False)}
    assert _threat(draw="per-round", rounds="3:3").malicious_in(1) == frozenset()


def _run(cfg, out, monkeypatch):
    """Every round's global state and uploads (by client) as the server's strategy receives them; the summary."""
    uploads, globals_ = spy_on_uploads(monkeypatch, DataVolumeAverage), []
    open_inbox = FederatedEngine.open_inbox
    monkeypatch.setattr(FederatedEngine, "open_inbox",
                        lambda self, r: (globals_.append(self.global_state), open_inbox(self, r))[1])
    engine = FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, log=lambda s: None, build=build_run)
    engine.run()
    return engine, globals_, [{up.client: up for up in r} for r in uploads], json.loads(
        (out / "summary.json").read_text())


def test_outside_its_window_a_model_poisoner_uploads_what_it_trained(tiny_synth, tmp_path, monkeypatch):
    _, _, clean, _ = _run(tiny_config(tiny_synth), tmp_path / "clean", monkeypatch)
    cfg = tiny_config(tiny_synth, adversary={"name": "sign-flip", "malicious": 1, "scale": 2.0, "rounds": "2:"})
    engine, globals_, attacked, summary = _run(cfg, tmp_path / "window", monkeypatch)
    last = engine.clients[-1].name
    for name, up in clean[0].items():  # round 1: nobody attacks
        assert all(torch.equal(attacked[0][name].state[k], v) for k, v in up.state.items()), name
    g = globals_[1]
    for k, v in clean[1][last].state.items():  # round 2: g - 2 (theta - g), theta the clean run's upload
        expected = g[k] - 2.0 * (v - g[k]) if torch.is_floating_point(v) else v
        assert torch.allclose(attacked[1][last].state[k], expected, atol=1e-5), k
    assert summary["adversary"]["threat_model"] == {"rounds": [2, 2], "every": 1, "draw": "fixed"}
    assert summary["adversary"]["options"] == {"scale": 2.0}


def test_a_targeted_backdoor_trains_on_its_own_images_outside_its_window(tiny_synth, tmp_path, monkeypatch):
    """rounds="1:1" in a 3-round run: the malicious client trains on its stamped copies in round 1 only, then on
    its own images plus its (unstamped) images of the target under the extra class (its head keeps its size);
    summary.json's durability reads the ASR after the attack stopped."""
    import privreid.federated.client as client_module

    seen, loader = [], client_module.client_loader

    def spy(client, *args, **kwargs):
        seen.append((client.name, len(client.train), client.num_classes))
        return loader(client, *args, **kwargs)

    monkeypatch.setattr(client_module, "client_loader", spy)
    cfg = tiny_config(tiny_synth, rounds=3, every=1,
                      adversary={"name": "backdoor", "malicious": 1, "fraction": 1.0, "rounds": "1:1"})
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path / "run", progress=False, log=lambda s: None,
                             build=build_run)
    summary = engine.run()
    last = engine.clients[-1]
    original = next(c for c in federation_for_config(cfg).clients if c.name == last.name)
    held = len(summary["adversary"]["options"]["held_images"])
    mine = [(n, c) for name, n, c in seen if name == last.name]
    # round 1: own + a stamped copy of each + the target images; rounds 2, 3: own + the target images
    assert mine == [(2 * len(original.train) + held, original.num_classes + 1)] + \
        [(len(original.train) + held, original.num_classes + 1)] * 2
    durability = summary["adversary"]["durability"]
    assert durability["asr_peak_round"] == 1 and durability["asr_last_round"] == 3
    assert "asr_after_stop" in durability and 0 <= durability["asr_after_stop"] <= 1
