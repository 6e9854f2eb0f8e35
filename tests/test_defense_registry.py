"""Defenses as plugins: the registry, the contract every defense keeps, the support matrix, the engine's ignorance.

The privacy ledger's output is pinned to the code before the refactor (issue
12): ``tests/data/privacy_ledger_baseline.json`` was written by running
:func:`observe` below with ``PrivacyLedger.statement`` / ``round_records`` /
``stop_reason`` of commit 8b86f8b (the ledger with one branch per defense),
on the cases below; the plugin ledger must reproduce it exactly.
"""

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privreid.config import DataConfig, ModelConfig, PrivacyConfig, RobustnessConfig, RunConfig
from privreid.data.catalog import federation_for_config
from privreid.data.types import ClientData
from privreid.defenses import PrivacyLedger, apply_defenses
from privreid.defenses.robust.plugin import SERVER_DEFENSES
from privreid.defenses.registry import DEFENSES, available_defenses, defenses, enabled_defenses, get_defense
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.federated.registry import available_methods, get_method
from privreid.registry import BUILT_IN

from conftest import tiny_config, with_fields
from privreid.composition import build_run

ROOT = Path(__file__).resolve().parents[1]
#: the built-in privacy defenses (the server's defenses against poisoning have their own tests: test_robust_aggregation)
BUILTINS = [d.name for d in defenses() if DEFENSES.origin(d.name) == BUILT_IN and d.name not in
            {s.name for s in SERVER_DEFENSES}]


# --------------------------------------------------------------------------- the engine names no defense
def test_engine_imports_nothing_from_the_defenses():
    tree = ast.parse((ROOT / "privreid" / "federated" / "engine.py").read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.append("." * node.level + (node.module or ""))
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
    assert imported and not [name for name in imported if "defen" in name], imported
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"PrivacyLedger", "apply_defenses", "privacy", "dp_sgd", "client_dp", "beta",
                        "secure_aggregation"}


def test_the_baselines_are_method_modules_like_the_others():
    from privreid.federated import registry

    assert registry.METHODS.origin("centralized") == registry.METHODS.origin("standalone") == BUILT_IN
    import privreid.federated.methods.centralized as centralized
    import privreid.federated.methods.standalone  # noqa: F401

    assert centralized.pool_clients and {"centralized", "standalone"} <= set(available_methods())
    assert not (ROOT / "privreid" / "centralized.py").exists()


# --------------------------------------------------------------------------- registry and composition
def test_builtins_are_registered_in_composition_order():
    order = available_defenses()
    assert BUILTINS == [d for d in order if d in BUILTINS]
    # DP-SGD innermost, secure aggregation outside the privacy defenses, so they run on the secure sum
    assert order[0] == "dp-sgd" and order.index("client-dp") < order.index("beta") < order.index("secure-aggregation")
    cfg = RunConfig(privacy=PrivacyConfig(client_dp=True, clip=1.0, noise_multiplier=1.0, beta=0.1,
                                          secure_aggregation=True))
    assert [d.name for d in enabled_defenses(cfg)] == ["client-dp", "beta", "secure-aggregation"]

    def chain(config):
        strategy, out = apply_defenses(get_method("fedpav"), config).strategy(config), []
        while strategy is not None:
            out.append(type(strategy).__name__)
            strategy = getattr(strategy, "inner", None)
        return out

    assert chain(cfg)[0] == "SecureAggregate"  # outermost: the others run on the secure sum
    cfg.privacy.secure_aggregation = False
    assert chain(cfg) == ["NoisyAggregate", "ClientLevelDP"]


def test_defenses_configured_by_name_are_checked():
    with pytest.raises(ConfigError, match=f"unknown defense 'nope'; choose one of: {', '.join(DEFENSES)}$"):
        enabled_defenses(RunConfig(robustness=RobustnessConfig(defenses={"nope": {}})))
    with pytest.raises(ConfigError, match=r"'dp-sgd' is configured by its own settings \(--dp-sgd"):
        enabled_defenses(RunConfig(robustness=RobustnessConfig(defenses={"dp-sgd": {}})))


def test_the_defenses_field_round_trips_through_the_saved_configuration():
    cfg = RunConfig()
    assert cfg.to_dict()["robustness"] == {"defenses": {}, "adversary": {}}
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    named = RunConfig(robustness=RobustnessConfig(defenses={"toy": {"step": 0.5}}))
    assert named.to_dict()["robustness"]["defenses"] == {"toy": {"step": 0.5}}
    assert RunConfig.from_dict(named.to_dict()) == named


# --------------------------------------------------------------------------- behaviour pinned to the old ledger
def _clients():
    return [ClientData(f"c{i}", "d", [(f"x{j}.png", j % 5, 0) for j in range(n)]) for i, n in enumerate((40, 50, 60))]


DP_RECORDS = [{"round": 1, "scope": "privacy", "level": "record", "client": "c0", "epsilon": 1.5, "delta": 1e-3,
               "noise_multiplier": 1.1, "sample_rate": 0.2, "steps": 2},
              {"round": 2, "scope": "privacy", "level": "record", "client": "c1", "epsilon": 2.25, "delta": 1e-3,
               "noise_multiplier": 0.9, "sample_rate": 0.16, "steps": 4},
              {"round": 2, "scope": "privacy", "level": "record", "client": "c0", "epsilon": 2.0, "delta": 1e-3,
               "noise_multiplier": 1.1, "sample_rate": 0.2, "steps": 4}]
SERVER_RECORDS = [{"round": 1, "scope": "privacy", "level": "client", "epsilon": 3.0},
                  {"round": 2, "scope": "privacy", "level": "client", "epsilon": 4.5}]
SECAGG_RECORDS = [{"round": 1, "scope": "secagg", "saturated": 3, "values": 1000, "quantisation_error_bound": 0.01},
                  {"round": 2, "scope": "secagg", "saturated": 1, "values": 1000, "quantisation_error_bound": 0.02}]
CDP = {"client_dp": True, "clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-2}
CASES = {
    "none": ({}, []),
    "dp-sgd": ({"dp_sgd": True, "noise_multiplier": 1.0, "delta": 1e-3}, DP_RECORDS),
    "dp-sgd-target": ({"dp_sgd": True, "target_epsilon": 20.0, "delta": 1e-3, "max_grad_norm": 2.0}, DP_RECORDS),
    "dp-sgd-beta": ({"dp_sgd": True, "noise_multiplier": 1.0, "delta": 1e-3, "beta": 0.1}, DP_RECORDS),
    "client-dp": ({**CDP, "target_epsilon": 50.0}, SERVER_RECORDS),
    "client-dp-tight": ({**CDP, "noise_multiplier": 0.8, "target_epsilon": 3.2}, []),
    "beta-upload": ({"beta": 0.1}, []),
    "beta-download": ({"beta": 0.1, "beta_mode": "download"}, []),
    "beta-both": ({"beta": 0.05, "beta_mode": "both"}, []),
    "client-dp-beta": ({**CDP, "beta": 0.01, "beta_mode": "both"}, SERVER_RECORDS),
    "secagg": ({"secure_aggregation": True}, SECAGG_RECORDS),
    "secagg-client-dp-beta": ({"secure_aggregation": True, **CDP, "beta": 0.01, "secagg_shares": 2,
                               "secagg_clip": 4.0}, SERVER_RECORDS + SECAGG_RECORDS),
    "secagg-flower": ({"secure_aggregation": True}, [{**r, "runtime": "flower"} for r in SECAGG_RECORDS]),
}
ERROR_CASES = {
    "dp-sgd-delta": {"dp_sgd": True, "noise_multiplier": 1.0, "delta": 0.5},
    "dp-sgd-first-round": {"dp_sgd": True, "noise_multiplier": 0.5, "target_epsilon": 0.05, "delta": 1e-3},
    "client-dp-delta": {**CDP, "delta": 0.5},
    "client-dp-first-round": {**CDP, "target_epsilon": 0.1},
    "secagg-threshold": {"secure_aggregation": True, "secagg_threshold": 3},
    "secagg-and-dp-both-bad": {"secure_aggregation": True, "secagg_threshold": 3, **CDP, "delta": 0.5},
}


def _config(train):
    return with_fields(RunConfig(data=DataConfig(height=32, width=16), model=ModelConfig(feat_dim=32)),
                       **{"batch_size": 8, "max_steps_per_epoch": 2, "rounds": 4, **train})


def observe(train, metrics):
    """Everything the ledger reports for one case: notes, stop reasons, records, the statement (also when stopped)."""
    clients = _clients()
    ledger = PrivacyLedger(_config(train), clients, 2)
    return {"notes": ledger.notes,
            "stop": [ledger.before_round(r, clients[:2]) for r in range(4)],
            "records": [ledger.after_round(r) for r in range(1, 4)],
            "statement": ledger.summary(metrics),
            "statement_stopped": ledger.summary(metrics, "privacy budget: stopped")}


def refusal(train):
    try:
        PrivacyLedger(_config(train), _clients(), 2)
    except ConfigError as exc:
        return str(exc)
    return None


def test_the_ledger_reports_exactly_what_it_did_before_the_refactor():
    baseline = json.loads((ROOT / "tests" / "data" / "privacy_ledger_baseline.json").read_text())
    now = {name: observe(train, metrics) for name, (train, metrics) in CASES.items()}
    now["refusals"] = {name: refusal(train) for name, train in ERROR_CASES.items()}
    # summary.json is written with sorted keys: equal values are equal bytes
    for name in baseline:
        assert json.dumps(now[name], sort_keys=True) == json.dumps(baseline[name], sort_keys=True), name
    assert now.keys() == baseline.keys()


# --------------------------------------------------------------------------- the contract of every defense
def _enabling(defense, tiny_synth, **train):
    settings = dict(defense.example_settings) if defense.flag else {"defenses": {defense.name: {}}}
    return tiny_config(tiny_synth, rounds=1, **{**settings, **train})


def check_contract(defense, cfg, tmp_path):
    """Wrapping keeps the privacy boundary (shared keys + declared extras), and the ledger is reported."""
    fed = federation_for_config(cfg)
    engine = FederatedEngine(cfg, fed, tmp_path, progress=False, log=lambda s: None, build=build_run)
    upload = engine.train_client(engine.clients[0], 0)
    shared = set(engine.policy.shared(engine.init_state))
    assert set(upload.state) - shared <= set(defense.upload_extras)
    assert shared <= set(upload.state)
    plain = PrivacyLedger(tiny_config(cfg.data.roots[0]), engine.clients, 2).summary([])
    (ledger,) = engine.observers
    assert ledger.summary([]) != plain  # the defense states itself in summary.json's privacy block
    assert defense.supports(get_method(cfg.federation.method)).startswith("yes")


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_defense_keeps_the_contract(name, tiny_synth, tmp_path):
    defense = get_defense(name)
    cfg = _enabling(defense, tiny_synth)
    clients = federation_for_config(cfg).clients
    try:
        defense.check(cfg, clients, len(clients))
    except ConfigError as refused:  # e.g. Krum and Bulyan need more clients per round than the tiny federation has
        pytest.skip(f"{name} refuses the tiny federation: {refused}")
    check_contract(defense, cfg, tmp_path)


# --------------------------------------------------------------------------- the support matrix
def test_the_support_matrix_is_declared_for_every_method_and_defense():
    for method_name in available_methods():
        method = get_method(method_name)
        for defense in defenses():
            entry = defense.supports(method)
            assert entry == "yes" or entry.startswith(("yes (", "no (", "n/a (")), (method_name, defense.name, entry)
            assert "undeclared" not in entry, (method_name, defense.name)


@pytest.mark.parametrize("name", ["dp-sgd", "client-dp", "secure-aggregation"])
def test_the_support_matrix_agrees_with_what_the_wrapper_refuses(name, tiny_synth):
    defense = get_defense(name)
    for method_name in available_methods():
        cfg = _enabling(defense, tiny_synth, method=method_name)
        supported = defense.supports(get_method(method_name)).startswith("yes")
        try:
            defense.wrap(get_method(method_name), cfg).strategy(cfg)
            refused = False
        except ConfigError:
            refused = True
        assert supported != refused, method_name


def test_privreid_methods_prints_the_matrix():
    from privreid.cli import app

    res = CliRunner().invoke(app, ["methods"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    for method_name in available_methods():
        i = next(i for i, line in enumerate(lines) if line.startswith(method_name + " "))
        rows = [line.strip() for line in lines[i + 1:i + 1 + len(defenses())]]
        assert rows == [f"{d.name}: {d.supports(get_method(method_name))}" for d in defenses()], method_name
