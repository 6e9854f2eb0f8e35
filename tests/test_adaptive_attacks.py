"""The adaptive model-poisoning attacks (issue 43, item 1): ALIE, IPM, Min-Max, Min-Sum, Fang, each against a
hand-computed round, and the collusion wrapper that applies them at the server, outermost."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import tiny_config
from privreid.composition import build_run
from privreid.data.catalog import federation_for_config
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.federated.strategy import DataVolumeAverage, RoundResult, Strategy, UniformAverage, Upload
from privreid.malicious_clients import get_malicious_client
from privreid.malicious_clients.alie import z_max
from privreid.malicious_clients.collusion import RewriteRound
from privreid.malicious_clients.min_max import largest_gamma

#: the server's state: two parameters, a BatchNorm mean (floating, attacked) and its batch counter (integer, kept)
GLOBAL = {"w": torch.tensor([1.0, -1.0]), "bn.running_mean": torch.tensor([0.5]),
          "bn.num_batches_tracked": torch.tensor(7)}


def _state(update, count=9):
    """An upload whose update over (w, bn.running_mean) is ``update``."""
    u = torch.tensor(update, dtype=torch.float64)
    return {"w": (GLOBAL["w"].double() + u[:2]).float(), "bn.running_mean": (GLOBAL["bn.running_mean"] + u[2:]).float(),
            "bn.num_batches_tracked": torch.tensor(count)}


def _update(state):
    return [*(state["w"].double() - GLOBAL["w"].double()).tolist(),
            *(state["bn.running_mean"].double() - GLOBAL["bn.running_mean"].double()).tolist()]


def _attack(name, malicious, benign, seed=0, **options):
    adversary = get_malicious_client(name)
    settings = {**adversary.options, **options}
    adversary.check(settings, [], [], None)
    out = adversary.poison_round(GLOBAL, [_state(u, 20 + i) for i, u in enumerate(malicious)],
                                 [_state(u) for u in benign], settings, torch.Generator().manual_seed(seed))
    for i, state in enumerate(out):  # the integer buffer is the client's own, every entry keeps its dtype
        assert state["bn.num_batches_tracked"].item() == 20 + i
        assert all(state[k].dtype == GLOBAL[k].dtype for k in GLOBAL)
    return [_update(s) for s in out]


BENIGN = [[1.0, 0.0, 2.0], [2.0, 0.0, 2.0], [3.0, 0.0, 2.0], [4.0, 0.0, 2.0]]
HONEST = [[10.0, 10.0, 10.0]]  # the malicious client's own update: unused under full knowledge


def test_alie_z_is_baruch_et_al_s_z_max_for_the_round():
    # n = 5, m = 1: s = floor(5/2 + 1) - 1 = 2, z = Phi^-1(3/5) = 0.253347 (normal table)
    assert z_max(5, 1) == pytest.approx(0.2533471, abs=1e-7)
    # n = 2, m = 1: s = 1, Phi^-1(1/2) = 0; a malicious majority (s <= 0) is taken as s = 1: Phi^-1(2/3) = 0.430727
    assert z_max(2, 1) == 0.0
    assert z_max(3, 3) == pytest.approx(0.4307273, abs=1e-7)


def test_alie_uploads_the_benign_mean_minus_z_standard_deviations():
    (update,) = _attack("alie", HONEST, BENIGN)
    # coordinate 0: mean 2.5, sample std sqrt(5/3); coordinates 1 and 2: no spread, the mean itself
    assert update == pytest.approx([2.5 - 0.2533471 * math.sqrt(5 / 3), 0.0, 2.0], abs=1e-6)
    (fixed,) = _attack("alie", HONEST, BENIGN, z=2.0)
    assert fixed == pytest.approx([2.5 - 2.0 * math.sqrt(5 / 3), 0.0, 2.0], abs=1e-6)


def test_ipm_uploads_minus_epsilon_times_the_benign_mean_and_partial_knowledge_its_own():
    assert _attack("ipm", HONEST * 2, BENIGN, epsilon=0.5) == [pytest.approx([-1.25, 0.0, -1.0])] * 2
    own = [[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]
    assert _attack("ipm", own, BENIGN, epsilon=2.0, knowledge="partial") == [pytest.approx([-4.0, -6.0, -8.0])] * 2


# benign updates (0,0), (2,0), (0,2) (third coordinate 0): mean (2/3, 2/3); every perturbation points along -(1,1).
# Min-Max: largest pairwise squared distance 8; t(1,1) is within 8 of (2,0) while 2t^2 - 4t + 4 <= 8: t >= 1 - sqrt 3.
# Min-Sum: largest row sum 4 + 8 = 12; 2t^2 + 2(2t^2 - 4t + 4) <= 12: t >= (2 - sqrt 10) / 3.
TRIANGLE = [[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 2.0, 0.0]]


@pytest.mark.parametrize("perturbation", ["unit", "std", "sign"])
@pytest.mark.parametrize("name,t", [("min-max", 1 - math.sqrt(3)), ("min-sum", (2 - math.sqrt(10)) / 3)])
def test_min_max_and_min_sum_go_as_far_as_their_bound_allows(name, t, perturbation):
    (update,) = _attack(name, HONEST, TRIANGLE, perturbation=perturbation, tolerance=1e-9)
    assert update == pytest.approx([t, t, 0.0], abs=1e-6)
    assert update[0] >= t - 1e-7  # the search keeps the last gamma that met the bound: never beyond it


def test_the_halving_search_is_algorithm_1():
    # ok while gamma <= 3, from 10: 10 fails, 5 fails, 2.5 passes, then 3.75, 3.125 fail, 2.8125 passes ...
    assert largest_gamma(lambda g: g <= 3, 10.0, 1e-6) == pytest.approx(3.0, abs=1e-5)
    assert largest_gamma(lambda g: False, 10.0, 1e-6) == 0.0
    assert largest_gamma(lambda g: True, 10.0, 1e-6) == pytest.approx(20.0, abs=1e-5)  # at most twice the start


def test_fang_full_knowledge_draws_beyond_the_benign_extremes_against_their_direction():
    # per coordinate: benign values, then (s_j, the interval of Fang et al.'s rule with b = 2)
    benign = [[1.0, -1.0, -3.0], [2.0, -2.0, -2.0], [3.0, 0.5, -1.0]]
    # c0: mean 2 > 0, min 1 > 0 -> [1/2, 1]; c1: mean -5/6 < 0, max 0.5 > 0 -> [0.5, 1]; c2: mean -2, max -1 -> [-1, -1/2]
    low, high = torch.tensor([0.5, 0.5, -1.0], dtype=torch.float64), torch.tensor([1.0, 1.0, -0.5], dtype=torch.float64)
    u = torch.rand((2, 3), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    updates = _attack("fang", HONEST * 2, benign, seed=5)
    assert torch.allclose(torch.tensor(updates, dtype=torch.float64), low + u * (high - low), atol=1e-6)
    assert updates[0] != updates[1]  # one draw per malicious client
    # a positive direction with a non-positive minimum: [b * min, min]
    (update,) = _attack("fang", HONEST, [[-1.0, 0, 0], [2.0, 0, 0], [3.0, 0, 0]], b=3.0)
    assert -3.0 <= update[0] <= -1.0


def test_fang_partial_knowledge_draws_three_to_four_own_deviations_against_the_own_mean():
    own = [[1.0, -1.0, 0.0], [3.0, -3.0, 0.0]]  # means 2, -2, 0; sample std sqrt 2, sqrt 2, 0
    u = torch.rand((2, 3), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    r2 = math.sqrt(2)
    low = torch.tensor([2 - 4 * r2, -2 + 3 * r2, 0.0], dtype=torch.float64)
    expected = low + u * torch.tensor([r2, r2, 0.0], dtype=torch.float64)
    updates = _attack("fang", own, BENIGN, seed=1, knowledge="partial")
    assert torch.allclose(torch.tensor(updates, dtype=torch.float64), expected, atol=1e-6)


@pytest.mark.parametrize("name,option,value,says", [
    ("alie", "knowledge", "some", "knowledge must be one of full, partial"),
    ("alie", "z", "x", "z must be a number"),
    ("ipm", "epsilon", 0, "epsilon must be a number > 0"),
    ("min-max", "perturbation", "cos", "perturbation must be one of unit, std, sign"),
    ("min-sum", "gamma", -1, "gamma must be a number > 0"),
    ("fang", "b", 1, "b must be a number > 1"),
])
def test_bad_options_are_refused_in_one_line(name, option, value, says):
    adversary = get_malicious_client(name)
    with pytest.raises(ConfigError, match=f"^adversary '{name}': {says}"):
        adversary.check({**adversary.options, option: value}, [], [], None)


class _Recording(Strategy):
    """A stub server: keeps the uploads it aggregates."""

    def __init__(self):
        self.seen = []

    def aggregate(self, global_state, uploads):
        self.seen = list(uploads)
        return RoundResult(global_state)


def test_the_collusion_wrapper_rewrites_before_the_inner_strategy_in_arrival_order():
    inner = _Recording()
    uploads = [Upload(name, {"w": torch.tensor([float(i)])}, 1) for i, name in enumerate("cab")]
    wrapped = RewriteRound(inner, lambda g, ups: [Upload(u.client, {"w": -u.state["w"]}, 1) for u in ups])
    acc = wrapped.accumulator({"w": torch.zeros(1)})
    for up in uploads:
        acc.add(up)
    assert inner.seen == []  # nothing reaches the server's strategy before the round is complete
    acc.result()
    assert [(u.client, u.state["w"].item()) for u in inner.seen] == [("c", -0.0), ("a", -1.0), ("b", -2.0)]
    assert RewriteRound(UniformAverage(), None).upload_weight() is UniformAverage().upload_weight()


def _rounds(cfg, out, monkeypatch):
    """Every round's global state and uploads (by client, in arrival order) as the server's strategy receives them."""
    rounds, original = [], DataVolumeAverage.accumulator

    def spy(self, global_state):
        inner, uploads = original(self, global_state), {}
        rounds.append((global_state, uploads))
        acc = type("Spy", (), {"add": lambda _, up: (uploads.__setitem__(up.client, up), inner.add(up)),
                               "result": lambda _: inner.result()})
        return acc()

    monkeypatch.setattr(DataVolumeAverage, "accumulator", spy)
    engine = FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, log=lambda s: None, build=build_run)
    engine.run()
    return engine, rounds


def test_ipm_in_a_run_rewrites_only_the_malicious_upload_of_its_attack_round(tiny_synth, tmp_path, monkeypatch):
    """Rounds 2:2 of 2: round 1 is the clean run's; in round 2 the server's strategy receives ``g - 2 * (b - g)`` from
    the malicious client (``b``: the benign upload, the only other one) and the benign upload unchanged."""
    _, clean = _rounds(tiny_config(tiny_synth), tmp_path / "clean", monkeypatch)
    cfg = tiny_config(tiny_synth, adversary={"name": "ipm", "malicious": 1, "epsilon": 2.0, "rounds": "2:2"})
    engine, attacked = _rounds(cfg, tmp_path / "ipm", monkeypatch)
    first, last = (c.name for c in engine.clients)
    for (_, ups), (_, clean_ups) in zip(attacked, clean):
        assert list(ups) == list(clean_ups) == [first, last]  # arrival order kept
    for name, up in clean[0][1].items():  # round 1: no attack
        assert all(torch.equal(attacked[0][1][name].state[k], v) for k, v in up.state.items())
    g, ups = attacked[1]
    benign, honest = clean[1][1][first].state, clean[1][1][last].state
    assert all(torch.equal(ups[first].state[k], v) for k, v in benign.items())
    for k, v in ups[last].state.items():
        if torch.is_floating_point(v):
            expected = g[k].double() - 2.0 * (benign[k].double() - g[k].double())
            assert torch.allclose(v.double(), expected, atol=1e-5), k
        else:
            assert torch.equal(v, honest[k]), k


def test_under_secure_aggregation_the_attack_rewrites_before_the_masking(tiny_synth, tmp_path, monkeypatch):
    """The collusion wrapper sits outside secure aggregation: the clients' masked inputs are the rewritten uploads,
    and the secure sum of them is the round's new global model (within the quantisation bound it reports)."""
    from privreid.defenses.secure_aggregation.mechanism import SecureAggregate

    seen, aggregate = [], SecureAggregate.aggregate

    def spy(self, global_state, uploads):
        seen.append((global_state, list(uploads)))
        return aggregate(self, global_state, uploads)

    monkeypatch.setattr(SecureAggregate, "aggregate", spy)
    cfg = tiny_config(tiny_synth, rounds=1, secure_aggregation=True,
                      adversary={"name": "ipm", "malicious": 1, "epsilon": 1.0})
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None,
                             build=build_run)
    engine.run()
    (g, (benign, malicious)), = seen
    assert malicious.client == engine.clients[-1].name
    weights = torch.tensor([benign.num_samples, malicious.num_samples], dtype=torch.float64)
    weights /= weights.sum()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    bound = next(r for r in records if r.get("scope") == "secagg")["quantisation_error_bound"]
    for k, v in malicious.state.items():
        if torch.is_floating_point(v):
            b = benign.state[k].double() - g[k].double()
            assert torch.allclose(v.double() - g[k].double(), -b, atol=1e-5), k
            mean = g[k].double() + weights[0] * b + weights[1] * (v.double() - g[k].double())
            assert torch.allclose(engine.global_state[k].double(), mean, atol=bound + 1e-6), k


def test_the_attack_sits_outermost_around_the_defenses_and_the_run_states_the_collusion():
    from privreid.config import RobustnessConfig, RunConfig
    from privreid.defenses.robust.rules import RobustAggregate

    config = RunConfig(robustness=RobustnessConfig(defenses={"robust-median": {}}, adversary={"name": "fang"}))
    plan = build_run(config)
    strategy = plan.method.strategy(config)
    assert isinstance(strategy, RewriteRound) and isinstance(strategy.inner, RobustAggregate)
    assert [d for d in plan.deviations if d.startswith("adversary fang: collusion simulated at the server")] == [
        "adversary fang: collusion simulated at the server: the malicious uploads are rewritten with knowledge of "
        "the round's benign updates before any defense sees them; the server learns nothing more; Fang et al.'s rule acts on updates (upload - global), "
        "the paper's on local model parameters"]
    # an attack on one client's upload leaves the server's strategy as it is, and states no collusion
    plain = RunConfig(robustness=RobustnessConfig(adversary={"name": "sign-flip"}))
    plan = build_run(plain)
    assert not isinstance(plan.method.strategy(plain), RewriteRound)
    assert not any("collusion" in d for d in plan.deviations)
