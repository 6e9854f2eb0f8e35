"""Poisoning adversaries (issue 30): what a malicious client uploads, and what the run records."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import spy_on_uploads, tiny_config
from privreid.malicious_clients import MALICIOUS_CLIENTS, available_malicious_clients, get_malicious_client, malicious_clients, register_malicious_client
from privreid.data.catalog import federation_for_config
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.federated.strategy import DataVolumeAverage
from privreid.registry import BUILT_IN
from privreid.composition import build_run


def _round_uploads(cfg, tmp_path, monkeypatch):
    rounds = spy_on_uploads(monkeypatch, DataVolumeAverage)
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None, build=build_run)
    engine.run()
    return engine, {up.client: up for up in rounds[0]}


def test_the_registry_lists_its_builtin_attacks_sorted_and_refuses_in_one_line():
    builtins = [name for name in MALICIOUS_CLIENTS if MALICIOUS_CLIENTS.origin(name) == BUILT_IN]
    assert {"label-flip", "scaled", "sign-flip"} <= set(builtins)
    assert available_malicious_clients() == sorted(builtins)
    assert all(get_malicious_client(name) is MALICIOUS_CLIENTS[name] and MALICIOUS_CLIENTS[name].name == name for name in builtins)
    with pytest.raises(ConfigError, match="^unknown adversary 'nope'; choose one of: " + ", ".join(sorted(builtins))):
        get_malicious_client("nope")
    with MALICIOUS_CLIENTS.restoring(), pytest.raises(ConfigError, match="^adversary 'scaled' is already registered$"):
        register_malicious_client(MALICIOUS_CLIENTS["scaled"])


@pytest.mark.parametrize("attack,factor", [("scaled", 3.0), ("sign-flip", -2.0)])
def test_a_model_poisoner_uploads_its_rescaled_update_and_the_others_are_untouched(attack, factor, tiny_synth,
                                                                                    tmp_path, monkeypatch):
    clean_engine, clean = _round_uploads(tiny_config(tiny_synth, rounds=1), tmp_path / "clean", monkeypatch)
    cfg = tiny_config(tiny_synth, rounds=1, adversary={"name": attack, "malicious": 1, "scale": abs(factor)})
    engine, poisoned = _round_uploads(cfg, tmp_path / "poisoned", monkeypatch)
    g = clean_engine.init_state
    last = engine.clients[-1].name
    assert poisoned.keys() == clean.keys()
    for name in clean:
        for k, v in clean[name].state.items():
            if name == last and torch.is_floating_point(v):
                assert torch.allclose(poisoned[name].state[k], g[k] + factor * (v - g[k]), atol=1e-5), k
            else:
                assert torch.equal(poisoned[name].state[k], v), (name, k)
    summary = json.loads((tmp_path / "poisoned" / "summary.json").read_text())
    assert summary["adversary"] == {"attack": attack, "summary": engine.observers[1].adversary.summary,
                                    "malicious_clients": [last], "options": {"scale": abs(factor)},
                                    "threat_model": {"rounds": [1, 1], "every": 1, "draw": "fixed"}, "detection": {}}


def test_a_boosted_backdoor_is_model_replacement_the_backdoor_upload_rescaled(tiny_synth, tmp_path, monkeypatch):
    """``boost`` (Bagdasaryan et al. 2020): the malicious client trains on the same poisoned data and uploads
    ``g + boost * (theta - g)``; ``boost`` 1 (the default) leaves the upload the method's own."""
    attack = {"name": "backdoor", "malicious": 1, "fraction": 1.0}
    plain_engine, plain = _round_uploads(tiny_config(tiny_synth, rounds=1, adversary=attack), tmp_path / "plain",
                                         monkeypatch)
    engine, boosted = _round_uploads(tiny_config(tiny_synth, rounds=1, adversary={**attack, "boost": 3.0}),
                                     tmp_path / "boosted", monkeypatch)
    g, last = plain_engine.init_state, engine.clients[-1].name
    for name in plain:
        for k, v in plain[name].state.items():
            if name == last and torch.is_floating_point(v):
                assert torch.allclose(boosted[name].state[k], g[k] + 3.0 * (v - g[k]), atol=1e-5), k
            else:
                assert torch.equal(boosted[name].state[k], v), (name, k)


def test_label_flip_moves_every_label_of_the_malicious_client_only(tiny_synth):
    cfg = tiny_config(tiny_synth)
    client = federation_for_config(cfg).clients[0]
    flipped = get_malicious_client("label-flip").poison_client(client, {}, cfg)
    assert [(p, c) for p, _, c in flipped.train] == [(p, c) for p, _, c in client.train]
    assert all(new == (old + 1) % client.num_classes and new != old
               for (_, old, _), (_, new, _) in zip(client.train, flipped.train))


def test_malicious_clients_by_count_or_name(tiny_synth):
    clients = federation_for_config(tiny_config(tiny_synth)).clients
    assert len(clients) == 2
    assert malicious_clients(1, clients) == clients[1:]
    assert malicious_clients(f"{clients[0].name}", clients) == clients[:1]
    with pytest.raises(ConfigError, match="the federation has 2 clients"):
        malicious_clients(3, clients)
    with pytest.raises(ConfigError, match="no client named nope"):
        malicious_clients(["nope"], clients)
