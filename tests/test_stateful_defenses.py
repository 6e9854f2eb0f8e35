"""Server defenses that remember across rounds: FoolsGold on each client's history, centered clipping from the
previous aggregate (the server state a strategy reads through ``with_server_state``, checkpointed and resumed), and
FLAME's noise level from an (epsilon, delta)."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import kill_in_round, tiny_config
from test_robust_defenses_2 import _pairs, _strategy
from privreid.checkpoint import load_checkpoint
from privreid.composition import build_run
from privreid.config import RobustnessConfig, RunConfig
from privreid.data.catalog import federation_for_config
from privreid.defenses import apply_defenses
from privreid.defenses.client_dp.mechanism import trainable_parameter_names
from privreid.defenses.registry import get_defense
from privreid.defenses.robust.rules import CC_MOMENTUM, FG_HISTORY, BoundedNorm, RobustAggregate, foolsgold_rule
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.federated.registry import get_method
from privreid.federated.strategy import SERVER_ENTRY, Upload
from privreid.malicious_clients.collusion import RewriteRound


def _round(glob: list[float], updates: dict[str, list[float]]) -> tuple[dict, list[Upload]]:
    g = torch.tensor(glob, dtype=torch.float64)
    return {"w": g}, [Upload(c, {"w": g + torch.tensor(u, dtype=torch.float64)}, 10) for c, u in updates.items()]


# round 1: sybils s1 = (1, 0), s2 = (0, 1) and h = (-1, -1); round 2: the sybils swap.  In either round alone the
# sybils are orthogonal (cos 0) and h at cos -1/sqrt(2) from both: every alpha is 1 (-> 0.99, logit ln 99 + 0.5 -> 1),
# the mean of the three is (0, 0).  Their histories after round 2: s1 = s2 = (1, 1) (cos 1), h = (-2, -2): alpha =
# 1 - max_j cs = (0, 0, 1), weights (0, 0, 1): the round's update is h's, (-1, -1)
ROUND_1 = {"s1": [1.0, 0.0], "s2": [0.0, 1.0], "h": [-1.0, -1.0]}
ROUND_2 = {"s1": [0.0, 1.0], "s2": [1.0, 0.0], "h": [-1.0, -1.0]}


def _two_foolsgold_rounds(strategy):
    glob, uploads = _round([1.0, 2.0], ROUND_1)
    first = strategy.aggregate(glob, uploads)
    torch.testing.assert_close(first.global_state["w"], glob["w"])  # the mean update (0, 0)
    assert first.records[0]["accepted"] == ["s1", "s2", "h"]
    glob, uploads = _round([1.0, 2.0], ROUND_2)
    return first, strategy.with_server_state(first.client_state).aggregate(glob, uploads), (glob, uploads)


def test_foolsgold_finds_a_sybil_pair_in_the_histories_that_one_round_hides():
    first, second, (glob, uploads) = _two_foolsgold_rounds(_strategy("foolsgold", {}))
    torch.testing.assert_close(second.global_state["w"], torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert second.records == [{"scope": "defense", "defense": "foolsgold", "accepted": ["h"],
                               "rejected": ["s1", "s2"]}]
    history = {c: entry[FG_HISTORY].tolist() for c, entry in second.client_state.items()}
    assert history == {"s1": [1.0, 1.0], "s2": [1.0, 1.0], "h": [-2.0, -2.0]}
    assert all(entry[FG_HISTORY].dtype == torch.float32 for entry in second.client_state.values())
    # without the kept histories round 2 looks honest: every client accepted, the mean update (0, 0)
    alone = _strategy("foolsgold", {}).aggregate(glob, uploads)
    torch.testing.assert_close(alone.global_state["w"], glob["w"])
    assert alone.records[0]["accepted"] == ["s1", "s2", "h"]


def test_the_attackers_and_norm_bound_wrappers_hand_the_kept_state_to_the_rule():
    wrapped = RewriteRound(BoundedNorm(RobustAggregate(foolsgold_rule(1.0), name="foolsgold", updates=True), 100.0,
                                       0.0, {"w"}), lambda glob, uploads: uploads)
    _, second, _ = _two_foolsgold_rounds(wrapped)
    torch.testing.assert_close(second.global_state["w"], torch.tensor([0.0, 1.0], dtype=torch.float64))


def test_centered_clipping_starts_from_the_previous_aggregate():
    # round 1 (nothing kept): updates 0, 1, 2, 10, 11 (pairs) from their median 2, tau = 2 sqrt(2) clips |x - v| to
    # 2: v = 2 + (-2 - 1 + 0 + 2 + 2) / 5 = 2.2, kept.  Round 2: updates 3, 4, 5, 13, 14 from v = 2.2: x - v = 0.8,
    # 1.8, 2.8, 10.8, 11.8 -> 0.8, 1.8, 2, 2, 2: v = 2.2 + 8.6 / 5 = 3.92 (from their median 5 it would be 5.2)
    cc = _strategy("centered-clipping", {"tau": 2 * math.sqrt(2)})
    first = cc.aggregate({"w": torch.zeros(2, dtype=torch.float64)}, _pairs([0.0, 1.0, 2.0, 10.0, 11.0]))
    assert first.client_state.keys() == {SERVER_ENTRY}
    torch.testing.assert_close(first.client_state[SERVER_ENTRY][CC_MOMENTUM],
                               torch.tensor([2.2, -2.2], dtype=torch.float64))
    glob = first.global_state
    second = cc.with_server_state(first.client_state).aggregate(glob, _pairs([3.0, 4.0, 5.0, 13.0, 14.0], 2.2))
    torch.testing.assert_close(second.global_state["w"], torch.tensor([2.2 + 3.92, -2.2 - 3.92], dtype=torch.float64))
    torch.testing.assert_close(second.client_state[SERVER_ENTRY][CC_MOMENTUM],
                               torch.tensor([3.92, -3.92], dtype=torch.float64))
    median_start = cc.aggregate(glob, _pairs([3.0, 4.0, 5.0, 13.0, 14.0], 2.2)).global_state["w"]
    torch.testing.assert_close(median_start, torch.tensor([2.2 + 5.2, -2.2 - 5.2], dtype=torch.float64))


@pytest.mark.parametrize("defense, options", [("foolsgold", {}), ("centered-clipping", {"tau": 0.05})])
def test_a_resumed_run_equals_the_uninterrupted_one_kept_state_included(tiny_synth, tmp_path, monkeypatch,
                                                                       defense, options):
    cfg = tiny_config(tiny_synth, rounds=3, every=3, defenses={defense: options})
    fed = federation_for_config(cfg)
    FederatedEngine(cfg, fed, tmp_path / "full", progress=False, build=build_run).run()
    kill_in_round(monkeypatch, FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run), 3)
    FederatedEngine(cfg, fed, tmp_path / "cut", progress=False, build=build_run).run(resume=True)
    full, cut = load_checkpoint(tmp_path / "full" / "ckpt.pt"), load_checkpoint(tmp_path / "cut" / "ckpt.pt")
    assert full["metrics"] == cut["metrics"]
    assert all(torch.equal(full["global_state"][k], cut["global_state"][k]) for k in full["global_state"])
    kept = full["server_client_state"]
    if defense == "foolsgold":  # a history for each client, the sum of its three updates
        assert kept.keys() == {c.name for c in fed.clients} and all(FG_HISTORY in e for e in kept.values())
    else:
        assert kept.keys() == {SERVER_ENTRY} and CC_MOMENTUM in kept[SERVER_ENTRY]
    assert kept.keys() == cut["server_client_state"].keys()
    for name, entry in kept.items():
        assert all(torch.equal(v, cut["server_client_state"][name][k]) for k, v in entry.items())


def _flame(**options) -> RunConfig:
    return RunConfig(robustness=RobustnessConfig(defenses={"flame": options}))


def test_flame_derives_lambda_from_epsilon_and_delta():
    # (1 / epsilon) sqrt(2 ln(1.25 / delta)): delta 1e-5 -> sqrt(2 ln 125000) = sqrt(23.4721) = 4.8448;
    # epsilon 2 halves it
    flame = get_defense("flame")
    assert flame.noise_level(_flame(epsilon=1.0, delta=1e-5)) == pytest.approx(4.8448, rel=1e-4)
    assert flame.noise_level(_flame(epsilon=2, delta=1e-5)) == pytest.approx(2.4224, rel=1e-4)
    assert flame.noise_level(_flame()) == 0.001 and flame.noise_level(_flame(noise_lambda=0.01)) == 0.01
    out: dict = {}
    flame.ledger(_flame(epsilon=2, delta=1e-5), [], 3).statement(out, [])
    assert out["server_defenses"]["flame"] == {"noise_lambda": pytest.approx(2.4224, rel=1e-4), "epsilon": 2,
                                               "delta": 1e-5}
    assert "noise_lambda is given" not in flame.deviation(_flame(epsilon=2, delta=1e-5))
    assert "noise_lambda is given" in flame.deviation(_flame())


def test_flame_noise_from_epsilon_and_delta_is_lambda_times_the_median_norm(tiny_synth):
    # identical updates of norm 10 on a trainable parameter: S = 10, noise std = 2.4224 * 10
    cfg = tiny_config(tiny_synth, defenses={"flame": {"epsilon": 2.0, "delta": 1e-5}})
    method = get_method("fedpav")
    param = next(k for k in trainable_parameter_names(method, cfg) if "classifier" not in k)
    update = torch.full((20000,), 10.0 / math.sqrt(20000), dtype=torch.float64)
    uploads = [Upload(f"c{i}", {param: update.clone()}, 1) for i in range(4)]
    torch.manual_seed(0)
    out = apply_defenses(method, cfg).strategy(cfg).aggregate({param: torch.zeros(20000, dtype=torch.float64)},
                                                              uploads).global_state
    assert float((out[param] - update).std()) == pytest.approx(24.224, rel=0.03)


@pytest.mark.parametrize("options, says", [
    ({"epsilon": 1.0}, "give epsilon and delta together.*got only epsilon"),
    ({"delta": 1e-5}, "got only delta"),
    ({"epsilon": 1.0, "delta": 1e-5, "noise_lambda": 0.01}, "give noise_lambda or epsilon and delta .* not both"),
    ({"epsilon": 0, "delta": 1e-5}, "epsilon must be > 0"),
    ({"epsilon": 1.0, "delta": 1.0}, r"delta must lie in \(0, 1\)"),
])
def test_flame_refuses_incomplete_or_double_noise_settings_in_one_line(options, says):
    with pytest.raises(ConfigError, match=says) as info:
        _strategy("flame", options).aggregate({"w": torch.zeros(2, dtype=torch.float64)}, _pairs([0.0, 1.0, 2.0]))
    assert "\n" not in str(info.value)
