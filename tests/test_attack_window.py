"""The threat model (issue 43, item 4): the attack window ``rounds``, its frequency ``every`` and the per-round
draw of the malicious clients; outside its attack rounds a malicious client uploads what it trained."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from badinput import BadInput, check_refused
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
    settings = {"rounds": None, "every": 1, "draw": "fixed", "malicious": 2, **settings}
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


TRAIN = ("train", "--data", "{synth}", "--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8",
         "--max-steps", "2", "--rounds", "4", "--device", "cpu", "--quiet", "--out", "{tmp}/run")


def _case(case_id, *args, says):
    return BadInput(case_id, (*TRAIN, *args), keep=("run",), says=says)


CASES = [
    _case("window-on-data-poisoning", "--adversary", "label-flip", "--set", "train.adversary.rounds=\"1:2\"",
          says="adversary 'label-flip' poisons its clients' data once, before training; rounds apply to attacks on "
               "the uploads only"),
    _case("draw-on-a-backdoor", "--adversary", "backdoor", "--set", "train.adversary.draw=\"per-round\"",
          says="adversary 'backdoor' poisons its clients' data once"),
    _case("window-reversed", "--adversary", "ipm", "--set", "train.adversary.rounds=\"3:2\"",
          says="adversary 'ipm': rounds must be START:STOP with 1 <= START <= STOP <= 4 (the run's rounds; got '3:2')"),
    _case("window-past-the-run", "--adversary", "alie", "--set", "train.adversary.rounds=\"2:5\"",
          says="1 <= START <= STOP <= 4"),
    _case("window-not-a-range", "--adversary", "alie", "--set", "train.adversary.rounds=2", says="got 2)"),
    _case("every-zero", "--adversary", "sign-flip", "--set", "train.adversary.every=0",
          says="adversary 'sign-flip': every must be a whole number >= 1 (got 0)"),
    _case("draw-unknown", "--adversary", "fang", "--set", "train.adversary.draw=\"often\"",
          says="draw must be one of fixed, per-round (got 'often')"),
    _case("per-round-named", "--adversary", "min-max", "--malicious-clients", "synthA", "--set",
          "train.adversary.draw=\"per-round\"", says="draw=per-round draws a number of clients"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_threat_models_are_refused_in_one_line(case, tmp_path, tiny_synth):
    line = check_refused(case, tmp_path, synth=tiny_synth)
    assert case.says.lower() in line.lower()


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
