"""The strategy contract (issue 12), checked on every registered method's server strategy.

``configure`` and ``aggregate`` are pure: they modify neither their inputs
nor anything outside their return value (the strategy object included), the
same inputs give the same result, the aggregate keeps the keys the round
shares, and per-client server state is returned for clients of the round only (plus, at most, the server-wide
entry); reading the server state kept in earlier rounds (``with_server_state``) changes neither it nor the strategy.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tiny_config

from privreid.defenses import apply_defenses
from privreid.federated.methods.dppt import identity_key
from privreid.federated.methods.fedarks import HAS_RATIO, RATIO, UPDATE_NORM
from privreid.federated.methods.fednova import STEPS
from privreid.federated.methods.fedpav_variants import CDW_METRIC
from privreid.federated.method_options import option_defaults
from privreid.federated.registry import available_methods, get_method
from privreid.federated.strategy import SERVER_ENTRY, DataVolumeAverage, RoundResult, Upload
from privreid.data.catalog import federation_for_config

TINY_OPTIONS = {"public_size": 16, "public_batch": 8, "kd_batch_size": 8}
#: what every fake client reports: the scalars some strategies read (CDW, KS, FedNova)
METRICS = {CDW_METRIC: 0.1, RATIO: 0.9, HAS_RATIO: 1.0, UPDATE_NORM: 1.0, STEPS: 2.0}


def same(a, b) -> bool:
    """Deep equality over tensors, containers and plain objects (their attributes)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dict__") and not callable(a):
        return type(a) is type(b) and same(vars(a), vars(b))
    if callable(a):
        return a is b or type(a) is type(b)
    return a == b


def run_setup(root, method: str, **train):
    m = get_method(method)
    cfg = tiny_config(root, method=method, method_options={k: v for k, v in TINY_OPTIONS.items() if k in option_defaults(m.options)},
                      **train)
    m = apply_defenses(m, cfg)
    prepare = m.prepare_clients_for(cfg)
    clients = federation_for_config(cfg).clients
    clients = prepare(clients) if prepare else clients
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model_state = m.build_model(cfg, initial_weights=False).state_dict()
    global_state = m.policy_for(cfg).shared(model_state)
    centres = method == "dppt"
    if centres:  # the previous round's global memory (Eq. 5)
        global_state[identity_key(clients[0], 0)] = torch.ones(32)
    g = torch.Generator().manual_seed(1)
    uploads = []
    for i, client in enumerate(clients[:3]):
        state = {k: v + 0.01 * (i + 1) * torch.randn(v.shape, generator=g) if v.is_floating_point() else v + i
                 for k, v in global_state.items() if not k.startswith("mrb/")}
        if centres:  # DPPT's upload extras: one centre per identity of the client
            state.update({identity_key(client, label): torch.randn(32, generator=g) for label in (0, 1)})
        metrics = {k: v * (i + 1) for k, v in METRICS.items()}
        uploads.append(Upload(client.name, state, 5 + 3 * i, metrics))
    return cfg, m.strategy(cfg), clients, global_state, uploads


def check_contract(strategy, clients, global_state, uploads) -> RoundResult:
    inputs = copy.deepcopy((global_state, uploads))
    before = copy.deepcopy(vars(strategy))
    torch.manual_seed(7)
    result = strategy.aggregate(global_state, uploads)
    assert isinstance(result, RoundResult)
    assert same((global_state, uploads), inputs), "aggregate modified its inputs"
    assert same(vars(strategy), before), "aggregate changed the strategy"
    shared = set(global_state).union(*(u.state for u in uploads))
    assert set(result.global_state) == shared  # keys preserved
    assert set(result.client_state) <= {u.client for u in uploads} | {SERVER_ENTRY}
    # the engine's path: streamed (or kept) uploads, same result
    torch.manual_seed(7)
    acc = strategy.accumulator(global_state)
    for u in uploads:
        acc.add(u)
    streamed = acc.result()
    assert same(streamed.global_state, result.global_state) and same(streamed.client_state, result.client_state)
    assert same((global_state, uploads), inputs)
    # configure: pure as well, and it transmits model keys of the shared state plus, at most, extras
    for client in clients[:3]:
        client_state = result.client_state.get(client.name, {})
        kept = copy.deepcopy((result.global_state, client_state))
        received = strategy.configure(result.global_state, client, client_state, 1)
        assert same((result.global_state, client_state), kept), "configure modified its inputs"
        assert set(global_state) - {k for k in global_state if k.startswith("mrb/")} <= set(received)
    assert same(vars(strategy), before), "configure changed the strategy"
    return result


@pytest.mark.parametrize("method", available_methods())
def test_every_registered_strategy_is_pure_and_keeps_the_keys(tiny_synth, method):
    _, strategy, clients, global_state, uploads = run_setup(tiny_synth, method)
    check_contract(strategy, clients, global_state, uploads)


@pytest.mark.parametrize("method,defense", [
    ("fedpav-cc", {"beta": 0.1, "beta_mode": "upload"}),  # the noise wrapper passes per-client state through
    ("fedpav", {"client_dp": True, "clip": 1.0, "noise_multiplier": 0.5}),
    ("dppt", {"beta": 0.1, "beta_mode": "both"}),
])
def test_defense_wrapped_strategies_keep_the_contract(tiny_synth, method, defense):
    _, strategy, clients, global_state, uploads = run_setup(tiny_synth, method, **defense)
    check_contract(strategy, clients, global_state, uploads)


@pytest.mark.parametrize("defense", ["foolsgold", "centered-clipping"])
def test_rules_that_remember_keep_the_contract_reading_what_they_kept(tiny_synth, defense):
    _, strategy, clients, global_state, uploads = run_setup(tiny_synth, "fedpav", defenses={defense: {}})
    first = check_contract(strategy, clients, global_state, uploads)
    kept = copy.deepcopy(first.client_state)
    before = copy.deepcopy(vars(strategy))
    second = check_contract(strategy.with_server_state(first.client_state), clients, first.global_state, uploads)
    assert same(first.client_state, kept) and same(vars(strategy), before)
    assert second.client_state.keys() == first.client_state.keys() and not same(second.client_state, kept)


def test_secure_aggregation_reports_its_record_in_the_result(tiny_synth):
    from privreid.defenses.secure_aggregation.mechanism import SecureAggregate

    g = torch.Generator().manual_seed(0)
    glob = {"w": torch.randn(3, 2, generator=g), "bn.num_batches_tracked": torch.tensor(1)}
    ups = [Upload(f"c{i}", {"w": glob["w"] + 0.1 * torch.randn(3, 2, generator=g),
                            "bn.num_batches_tracked": torch.tensor(2)}, 4 + i) for i in range(3)]
    strategy = SecureAggregate(DataVolumeAverage(), frozenset(glob), tiny_config(tiny_synth, secure_aggregation=True))
    result = check_contract(strategy, [], glob, ups)
    assert [r["scope"] for r in result.records] == ["secagg"] and result.records[0]["clients"] == 3


def test_clustered_average_returns_cluster_models_as_per_client_state(tiny_synth):
    """FedPav-CC: ``aggregate`` returns each client's cluster model; ``configure`` transmits it (Alg. 2 line 6)."""
    from privreid.federated.methods import fedpav_variants as fv

    _, strategy, clients, global_state, uploads = run_setup(tiny_synth, "fedpav-cc")
    result = check_contract(strategy, clients, global_state, uploads)
    assert set(result.client_state) == {u.client for u in uploads}  # every client of the round was clustered
    for client in clients[:len(uploads)]:
        entry = result.client_state[client.name]
        assert client.name in entry[fv.CC_MEMBERS]
        assert strategy.configure(result.global_state, client, entry, 1) is entry[fv.CC_MODEL]
        assert strategy.configure(result.global_state, client, {}, 1) is result.global_state  # never clustered


def test_a_two_argument_make_strategy_is_used_as_it_is():
    import dataclasses
    import warnings

    def factory(config, model_config):
        return DataVolumeAverage()

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        method = dataclasses.replace(get_method("fedavg"), name="new-style", make_strategy=factory)
    assert method.make_strategy is factory
