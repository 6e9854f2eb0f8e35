"""Issue 43's server defenses (geometric median, centered clipping, FoolsGold, FLTrust, FLAME), the detection records of
the rules that select clients, and norm-bound under secure aggregation as a verified bound."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import tiny_config, with_fields
from test_secagg import flower_cfg, secure_flower_run, synth3  # noqa: F401 (synth3: the Flower sites' fixture)
from privreid.config import RunConfig
from privreid.defenses import apply_defenses
from privreid.defenses.client_dp.mechanism import trainable_parameter_names
from privreid.defenses.robust.rules import BoundedNorm, RobustAggregate, flame_rule
from privreid.defenses.secure_aggregation.mechanism import SecureAggregate
from privreid.errors import ConfigError
from privreid.federated.registry import get_method
from privreid.federated.strategy import DataVolumeAverage, UniformAverage, Upload


def _strategy(name: str, options: dict, **train):
    cfg = with_fields(RunConfig(), defenses={name: options}, **train)
    return apply_defenses(get_method("fedpav"), cfg).strategy(cfg)


def _pairs(values: list[float], center: float = 0.0) -> list[Upload]:
    """One coordinate pair (center + v, -center - v) per upload, as tests/test_robust_aggregation.py's."""
    return [Upload(f"c{i}", {"w": torch.tensor([center + v, -center - v], dtype=torch.float64),
                             "bn.num_batches_tracked": torch.tensor(i)}, 10) for i, v in enumerate(values)]


def _vectors(rows: list[list[float]]) -> list[Upload]:
    return [Upload(f"c{i}", {"w": torch.tensor(r, dtype=torch.float64)}, 10) for i, r in enumerate(rows)]


def _root(tmp_path, update: dict) -> str:
    path = tmp_path / "g0.pt"
    torch.save(update, path)
    return str(path)


@pytest.mark.parametrize("name, options", [("robust-geomed", {}), ("centered-clipping", {"tau": 0.1}),
                                           ("fltrust", None), ("flame", {"noise_lambda": 0})])
def test_on_identical_uploads_each_new_rule_is_plain_averaging(name, options, tmp_path):
    torch.manual_seed(0)
    glob = {"conv.weight": torch.randn(4, 3, 3, 3), "bn.running_var": torch.rand(4) + 0.5,
            "bn.num_batches_tracked": torch.tensor(7)}
    state = {"conv.weight": glob["conv.weight"] + 0.3 * torch.randn(4, 3, 3, 3),
             "bn.running_var": glob["bn.running_var"] * 1.1, "bn.num_batches_tracked": torch.tensor(9)}
    if options is None:  # FLTrust's root update is the clients' own: every trust score is 1
        options = {"root": _root(tmp_path, {k: state[k] - glob[k] for k in ("conv.weight", "bn.running_var")})}
    uploads = [Upload(f"c{i}", {k: v.clone() for k, v in state.items()}, 5 + i) for i in range(5)]
    strategy = _strategy(name, options)
    assert isinstance(strategy, RobustAggregate)
    robust = strategy.aggregate(glob, uploads).global_state
    plain = DataVolumeAverage().aggregate(glob, uploads).global_state
    assert robust.keys() == plain.keys()
    for k in plain:
        assert robust[k].dtype == plain[k].dtype
        torch.testing.assert_close(robust[k], plain[k], rtol=0, atol=1e-6)


def test_foolsgold_treats_identical_uploads_as_sybils_and_keeps_the_global_model():
    """Every client has a twin (cos 1): every weight is 1 - 1 = 0, so nothing is added (the reference code
    divides 0 by 0 here); the record rejects every client."""
    glob = {"w": torch.tensor([1.0, 2.0], dtype=torch.float64)}
    result = _strategy("foolsgold", {}).aggregate(glob, _vectors([[3.0, 1.0]] * 4))
    assert torch.equal(result.global_state["w"], glob["w"])
    assert result.records == [{"scope": "defense", "defense": "foolsgold", "accepted": [],
                               "rejected": ["c0", "c1", "c2", "c3"]}]


def test_hand_computed_geometric_median():
    # updates 0, 1, 5 around a global of 1 (pairs: distances are sqrt(2)|.|): z0 = mean = 2; one Weiszfeld step
    # weighs them by 1/2, 1/1, 1/3: z1 = (0/2 + 1 + 5/3) / (1/2 + 1 + 1/3) = 16/11; many steps reach the median 1
    glob = {"w": torch.tensor([1.0, -1.0], dtype=torch.float64)}
    one = _strategy("robust-geomed", {"iterations": 1}).aggregate(glob, _pairs([0.0, 1.0, 5.0], 1.0)).global_state
    torch.testing.assert_close(one["w"], torch.tensor([1 + 16 / 11, -1 - 16 / 11], dtype=torch.float64))
    many = _strategy("robust-geomed", {"iterations": 200}).aggregate(glob, _pairs([0.0, 1.0, 5.0], 1.0))
    assert abs(float(many.global_state["w"][0]) - 2.0) < 1e-3
    assert many.records == []  # it selects no client


def test_hand_computed_centered_clipping():
    # updates 0, 1, 2, 10, 11 (pairs); v0 = their median 2; tau = 2 sqrt(2) clips each |x - v| to 2:
    # -2, -1, 0, 2, 2 -> v1 = 2 + 1/5 = 2.2; from 2.2: -2, -1.2, -0.2, 2, 2 -> v2 = 2.2 + 0.6/5 = 2.32
    for iterations, want in ((1, 2.2), (2, 2.32)):
        out = _strategy("centered-clipping", {"tau": 2 * math.sqrt(2), "iterations": iterations}).aggregate(
            {"w": torch.zeros(2, dtype=torch.float64)}, _pairs([0.0, 1.0, 2.0, 10.0, 11.0])).global_state
        torch.testing.assert_close(out["w"], torch.tensor([want, -want], dtype=torch.float64))


def test_hand_computed_foolsgold():
    # a = (1, 0), b = (1, 1), c = (-1, 1): cos(a, b) = 1/sqrt(2), cos(a, c) = -1/sqrt(2), cos(b, c) = 0, so
    # v = (0.707, 0.707, 0); pardoning scales c's row by 0 / 0.707; alpha = 1 - max_j cs = (0.293, 0.293, 1)
    # -> 0.99 for c; logit ln(0.293 / 0.707) + 0.5 = -0.38 -> 0 for a and b, ln(99) + 0.5 -> 1 for c
    result = _strategy("foolsgold", {}).aggregate({"w": torch.zeros(2, dtype=torch.float64)},
                                                  _vectors([[1.0, 0.0], [1.0, 1.0], [-1.0, 1.0]]))
    torch.testing.assert_close(result.global_state["w"], torch.tensor([-1.0, 1.0], dtype=torch.float64))
    assert result.records == [{"scope": "defense", "defense": "foolsgold", "accepted": ["c2"],
                               "rejected": ["c0", "c1"]}]
    # two sybils (identical) and an honest client orthogonal to them: weights (0, 0, 1)
    sybils = _strategy("foolsgold", {}).aggregate({"w": torch.zeros(2, dtype=torch.float64)},
                                                  _vectors([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
    assert sybils.records[0]["accepted"] == ["c2"]
    torch.testing.assert_close(sybils.global_state["w"], torch.tensor([0.0, 1.0], dtype=torch.float64))


def test_hand_computed_fltrust(tmp_path):
    # g0 = (1, 0): TS = ReLU(cos) = 1, 0, 1/sqrt(2), 0 for (2, 0), (0, 3), (1, 1), (-1, 0); rescaled to ||g0|| = 1:
    # (1, 0) and (1, 1)/sqrt(2); g = ((1, 0) + (1, 1)/2) / (1 + 1/sqrt(2))
    root = _root(tmp_path, {"w": torch.tensor([1.0, 0.0])})
    result = _strategy("fltrust", {"root": root}).aggregate(
        {"w": torch.zeros(2, dtype=torch.float64)}, _vectors([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0], [-1.0, 0.0]]))
    s = 1 + 1 / math.sqrt(2)
    torch.testing.assert_close(result.global_state["w"], torch.tensor([1.5 / s, 0.5 / s], dtype=torch.float64))
    assert result.records == [{"scope": "defense", "defense": "fltrust", "accepted": ["c0", "c2"],
                               "rejected": ["c1", "c3"]}]


def test_fltrust_without_a_root_update_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="needs the server's root update g0") as info:
        _strategy("fltrust", {}).aggregate({}, _vectors([[1.0], [2.0]]))
    assert "\n" not in str(info.value)
    (tmp_path / "junk.pt").write_bytes(b"not a tensor file")
    with pytest.raises(ConfigError, match="cannot read the root update"):
        _strategy("fltrust", {"root": str(tmp_path / "junk.pt")}).aggregate({}, _vectors([[1.0], [2.0]]))
    with pytest.raises(ConfigError, match="lacks 1 uploaded keys"):
        _strategy("fltrust", {"root": _root(tmp_path, {"v": torch.ones(1)})}).aggregate(
            {"w": torch.zeros(1, dtype=torch.float64)}, _vectors([[1.0], [2.0]]))


@pytest.mark.parametrize("name, options, says", [
    ("robust-geomed", {"iterations": 0}, "iterations must be > 0"),
    ("robust-geomed", {"nu": 0}, "nu must be > 0"),
    ("centered-clipping", {"tau": -1}, "tau must be > 0"),
    ("centered-clipping", {"iterations": 1.5}, "iterations must be an integer"),
    ("foolsgold", {"kappa": 0}, "kappa must be > 0"),
    ("flame", {"noise_lambda": -0.001}, "noise_lambda must be >= 0"),
    ("flame", {"noise_lambda": "0.001"}, "noise_lambda must be a number"),
])
def test_bad_options_are_one_line(name, options, says):
    with pytest.raises(ConfigError, match=says) as info:
        _strategy(name, options).aggregate({"w": torch.zeros(2, dtype=torch.float64)}, _pairs([0.0, 1.0, 2.0]))
    assert "\n" not in str(info.value)


def test_hand_computed_flame():
    # updates (1, 0), (-2, 0), (3, 0), (-5, 0), (24, 7) around G = (1, -1): c0, c2, c4 within cosine distance
    # 1 - 24/25 = 0.04 of each other, c1 and c3 at 1.96 from them: HDBSCAN's cluster of >= 5 // 2 + 1 = 3 is
    # {c0, c2, c4}, c1 and c3 are noise.  Norms 1, 2, 3, 5, 25 (every client's): S = 3; clipped (1, 0), (3, 0),
    # (24, 7) * 3/25 = (2.88, 0.84); mean (6.88 / 3, 0.28); noise_lambda 0: no noise
    glob = {"w": torch.tensor([1.0, -1.0], dtype=torch.float64)}
    rows = [[1.0, 0.0], [-2.0, 0.0], [3.0, 0.0], [-5.0, 0.0], [24.0, 7.0]]
    result = _strategy("flame", {"noise_lambda": 0}).aggregate(glob, _vectors([[1 + a, -1 + b] for a, b in rows]))
    torch.testing.assert_close(result.global_state["w"], torch.tensor([1 + 6.88 / 3, -1 + 0.28], dtype=torch.float64))
    assert result.records == [{"scope": "defense", "defense": "flame", "accepted": ["c0", "c2", "c4"],
                               "rejected": ["c1", "c3"]}]


def test_flame_noise_is_lambda_times_the_median_norm_on_the_trainable_parameters_only():
    # identical updates, of norm 12 on "w" and (3, 4) on "bn.running_var": S = sqrt(144 + 25) = 13 (the norm covers
    # every floating tensor), lambda 1/13: the aggregate is the update plus N(0, 1) on "w" only
    update = torch.full((20000,), 12.0 / math.sqrt(20000), dtype=torch.float64)
    stats = torch.tensor([3.0, 4.0], dtype=torch.float64)
    uploads = [Upload(f"c{i}", {"w": update.clone(), "bn.running_var": stats.clone()}, 1) for i in range(4)]
    glob = {"w": torch.zeros(20000, dtype=torch.float64), "bn.running_var": torch.zeros(2, dtype=torch.float64)}
    torch.manual_seed(0)
    out = RobustAggregate(flame_rule(1 / 13, {"w"}), name="flame", updates=True).aggregate(glob, uploads).global_state
    assert float((out["w"] - update).std()) == pytest.approx(1.0, rel=0.03)
    assert torch.equal(out["bn.running_var"], stats)


def test_flame_noises_the_methods_trainable_parameters(tiny_synth):
    cfg = tiny_config(tiny_synth, defenses={"flame": {"noise_lambda": 1.0}})
    model = get_method("fedpav").build_model(cfg, initial_weights=False)
    trainable = trainable_parameter_names(get_method("fedpav"), cfg)
    param = next(k for k in trainable if "classifier" not in k)
    buffer = next(k for k, _ in model.named_buffers() if k.endswith("running_var"))
    glob = {param: torch.zeros(50), buffer: torch.zeros(50)}
    uploads = [Upload(f"c{i}", {param: torch.ones(50), buffer: torch.ones(50)}, 1) for i in range(3)]
    out = apply_defenses(get_method("fedpav"), cfg).strategy(cfg).aggregate(glob, uploads).global_state
    assert not torch.equal(out[param], torch.ones(50)) and torch.equal(out[buffer], torch.ones(50))


def test_flame_needs_two_clients_per_round():
    with pytest.raises(ConfigError, match="at least 2 clients per round") as info:
        _strategy("flame", {}).aggregate({"w": torch.zeros(1, dtype=torch.float64)}, _vectors([[1.0]]))
    assert "\n" not in str(info.value)


def test_a_flame_run_records_its_verdicts_and_deviation(tiny_synth, tmp_path):
    from privreid.training import train_run

    train_run(tiny_config(tiny_synth, rounds=1, defenses={"flame": {}}), tmp_path / "run", progress=False,
              echo=lambda s: None)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["privacy"]["server_defenses"] == {"flame": {"noise_lambda": 0.001, "epsilon": None, "delta": None}}
    assert any(d.startswith("flame clusters the updates'") for d in summary["deviations"])
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (record,) = [r for r in records if r.get("scope") == "defense"]
    # two clients: HDBSCAN's single cluster of 2 // 2 + 1 = 2 holds both
    assert record["defense"] == "flame" and sorted(record["accepted"]) == ["synthA", "synthB"]
    assert record["rejected"] == []


def test_krum_and_multi_krum_records_name_the_uploads_whose_mean_is_the_output():
    # the hand case of test_robust_aggregation.py: Krum picks c1; Multi-Krum (keep 3) averages c0, c1, c2
    for keep, accepted in ((0, ["c1"]), (3, ["c0", "c1", "c2"])):
        uploads = _pairs([0.0, 1.0, 2.5, 5.0, 100.0])
        result = _strategy("robust-krum", {"f": 1, "keep": keep}).aggregate({}, uploads)
        (record,) = result.records
        assert record == {"scope": "defense", "defense": "robust-krum", "accepted": accepted,
                          "rejected": [u.client for u in uploads if u.client not in accepted]}
        mean = UniformAverage().aggregate({}, [u for u in uploads if u.client in accepted]).global_state
        assert torch.equal(result.global_state["w"], mean["w"])
    g = torch.Generator().manual_seed(3)  # random uploads: the record's accepted set still gives the output
    uploads = [Upload(f"c{i}", {"w": torch.randn(50, generator=g, dtype=torch.float64)}, 1 + i) for i in range(9)]
    result = _strategy("robust-krum", {"f": 2, "keep": 4}).aggregate({}, uploads)
    kept = [u for u in uploads if u.client in result.records[0]["accepted"]]
    assert len(kept) == 4
    torch.testing.assert_close(result.global_state["w"], UniformAverage().aggregate({}, kept).global_state["w"],
                               rtol=0, atol=1e-12)


def test_bulyan_record_is_its_selection_and_the_output_is_the_trimmed_mean_around_its_median():
    values = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 1e6]
    result = _strategy("robust-bulyan", {"f": 1}).aggregate({}, _pairs(values))
    (record,) = result.records
    assert len(record["accepted"]) == 5 and "c6" in record["rejected"]  # theta = n - 2f = 5; the outlier out
    chosen = np.array([values[int(c[1:])] for c in record["accepted"]])
    closest = chosen[np.argsort(np.abs(chosen - np.median(chosen)), kind="stable")[:3]]  # beta = n - 4f = 3
    assert float(result.global_state["w"][0]) == pytest.approx(closest.mean())


def test_median_and_trimmed_mean_select_no_client():
    for name, options in (("robust-median", {}), ("robust-trimmed-mean", {"fraction": 0.2})):
        assert _strategy(name, options).aggregate({}, _pairs([0.0, 1.0, 2.0, 3.0, 9.0])).records == []


def test_norm_bound_records_the_clients_it_clipped():
    glob = {"w": torch.zeros(4)}
    uploads = [Upload("a", {"w": torch.full((4,), 1.0)}, 1), Upload("b", {"w": torch.full((4,), 0.1)}, 1)]
    result = BoundedNorm(DataVolumeAverage(), 1.0, 0.0, {"w"}).aggregate(glob, uploads)
    assert result.records == [{"scope": "defense", "defense": "norm-bound", "clipped": ["a"]}]  # |a| = 2 > 1


def _secure(tiny_synth, bound: float | None, buffers: bool | None = None):
    defenses = {} if bound is None else {"norm-bound": {"bound": bound, **({} if buffers is None else
                                                                          {"buffers": buffers})}}
    cfg = tiny_config(tiny_synth, secure_aggregation=True, defenses=defenses)
    return cfg, apply_defenses(get_method("fedpav"), cfg).strategy(cfg)


def _boosted_round(cfg):
    """The tiny model's global state, four honest uploads (small updates) and one boosted x100, BN included."""
    torch.manual_seed(0)
    glob = get_method("fedpav").build_model(cfg, initial_weights=False).state_dict()
    glob = {k: v for k, v in glob.items() if "classifier" not in k}
    g = torch.Generator().manual_seed(1)

    def moved(scale: float) -> dict:
        return {k: (v + scale * 1e-3 * torch.randn(v.shape, generator=g) if torch.is_floating_point(v) else v + 1)
                for k, v in glob.items()}

    honest = [Upload(f"h{i}", moved(1.0), 10) for i in range(4)]
    boosted = Upload("m", {k: (glob[k] + 100 * (v - glob[k]) if torch.is_floating_point(v) else v)
                           for k, v in moved(5.0).items()}, 10)
    return glob, honest, boosted


def _distance(a: dict, b: dict) -> float:
    return math.sqrt(sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in a
                         if torch.is_floating_point(a[k])))


def test_norm_bound_under_secure_aggregation_rejects_a_boosted_input_bn_statistics_included(tiny_synth):
    cfg, strategy = _secure(tiny_synth, 10.0)
    assert isinstance(strategy, SecureAggregate) and strategy.input_bound is not None
    assert any(k.endswith("running_var") for k in strategy.input_bound[1])  # default under secure aggregation
    glob, honest, boosted = _boosted_round(cfg)
    honest_norm = max(_distance(u.state, glob) for u in honest)
    assert honest_norm < 10.0 < _distance(boosted.state, glob)
    result = strategy.aggregate(glob, [*honest, boosted])
    out = result.global_state
    assert all(torch.isfinite(v).all() for v in out.values() if torch.is_floating_point(v))
    honest_mean = DataVolumeAverage().aggregate(glob, honest).global_state
    secagg = next(r for r in result.records if r["scope"] == "secagg")
    assert secagg["rejected"] == ["m"]
    # the sum holds the honest inputs only: the honest mean up to the quantisation error of the vector
    n_values = sum(v.numel() for v in glob.values() if torch.is_floating_point(v))
    assert _distance(out, honest_mean) <= secagg["quantisation_error_bound"] * math.sqrt(n_values) + 1e-6
    assert {"scope": "defense", "defense": "norm-bound", "accepted": ["h0", "h1", "h2", "h3"],
            "rejected": ["m"]} in result.records
    _, unbounded = _secure(tiny_synth, None)
    poisoned = unbounded.aggregate(glob, [*honest, boosted]).global_state
    assert _distance(poisoned, honest_mean) > 10 * _distance(out, honest_mean) + 0.5  # what the bound kept out


def test_the_verified_bound_covers_bn_statistics_only_when_asked(tiny_synth):
    cfg, strategy = _secure(tiny_synth, 10.0, buffers=False)
    assert not any(k.endswith(("running_mean", "running_var")) for k in strategy.input_bound[1])
    glob, honest, _ = _boosted_round(cfg)
    stats_only = Upload("m", {k: (v * 100 if k.endswith("running_var") else v.clone()) for k, v in glob.items()}, 10)
    result = strategy.aggregate(glob, [*honest, stats_only])
    assert next(r for r in result.records if r["scope"] == "secagg")["rejected"] == []  # boosted BN passes
    _, covered = _secure(tiny_synth, 10.0)
    assert next(r for r in covered.aggregate(glob, [*honest, stats_only]).records
                if r["scope"] == "secagg")["rejected"] == ["m"]


def test_when_every_input_fails_the_round_keeps_the_global_model(tiny_synth):
    cfg, strategy = _secure(tiny_synth, 1e-9)
    glob, honest, _ = _boosted_round(cfg)
    result = strategy.aggregate(glob, honest)
    assert all(torch.equal(result.global_state[k], glob[k]) for k in glob)
    assert result.records[1]["rejected"] == ["h0", "h1", "h2", "h3"]


def test_weak_dp_and_the_robust_rules_stay_refused_under_secure_aggregation(tiny_synth):
    from privreid.defenses.registry import get_defense

    for name in ("weak-dp", "robust-geomed", "foolsgold", "flame"):
        cfg = tiny_config(tiny_synth, secure_aggregation=True, defenses={name: {}})
        with pytest.raises(ConfigError, match="--secure-aggregation hides"):
            get_defense(name).check(cfg, [], 3)


def test_a_secure_norm_bound_run_states_the_verified_bound(tiny_synth, tmp_path):
    from privreid.training import train_run

    cfg = tiny_config(tiny_synth, rounds=1, secure_aggregation=True, defenses={"norm-bound": {"bound": 5.0}})
    train_run(cfg, tmp_path / "run", progress=False, echo=lambda s: None)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    stated = summary["privacy"]["server_defenses"]["norm-bound"]
    assert stated["bound"] == 5.0 and stated["buffers"] is True and "proofs are not computed" in stated[
        "verified_bound"]
    assert any("proofs are not computed" in d for d in summary["deviations"])
    assert summary["privacy"]["server_view"].endswith("Which clients' inputs failed the verified norm bound.")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("scope") == "defense" and r["defense"] == "norm-bound" for r in records)


def test_the_verified_bound_is_refused_on_flower_where_a_sites_weight_is_public(synth3, tmp_path):
    from privreid.flower.messages import FlowerRunError

    with pytest.raises(FlowerRunError, match="'norm-bound' under --secure-aggregation .* runs in-process only"):
        secure_flower_run(synth3, tmp_path, flower_cfg(synth3, defenses={"norm-bound": {"bound": 1.0}}))
