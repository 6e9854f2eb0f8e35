"""Server-side robust aggregation and norm bounding (issue 30): the rules on hand-made uploads, and a run."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import tiny_config
from privreid.config import FederationConfig, PrivacyConfig, RobustnessConfig, RunConfig
from privreid.defenses import apply_defenses
from privreid.defenses.registry import get_defense
from privreid.defenses.robust.rules import BoundedNorm, RobustAggregate
from privreid.errors import ConfigError
from privreid.federated.registry import get_method
from privreid.federated.strategy import DataVolumeAverage, Upload

RULES = {"robust-krum": {"f": 1}, "robust-krum/multi": {"f": 1, "keep": 3}, "robust-median": {},
         "robust-trimmed-mean": {"fraction": 0.2}, "robust-bulyan": {"f": 1}}


def _strategy(name: str, options: dict):
    cfg = RunConfig(robustness=RobustnessConfig(defenses={name: options}))
    return apply_defenses(get_method("fedpav"), cfg).strategy(cfg)


def _uploads(values: list[float], samples: list[int] | None = None) -> list[Upload]:
    samples = samples or [10] * len(values)
    return [Upload(f"c{i}", {"w": torch.tensor([v, -v]), "bn.num_batches_tracked": torch.tensor(i)}, n)
            for i, (v, n) in enumerate(zip(values, samples))]


@pytest.mark.parametrize("case", RULES)
def test_on_identical_uploads_each_robust_rule_is_plain_averaging(case):
    torch.manual_seed(0)
    state = {"conv.weight": torch.randn(4, 3, 3, 3), "bn.running_var": torch.rand(4) + 0.5,
             "bn.num_batches_tracked": torch.tensor(7)}
    uploads = [Upload(f"c{i}", {k: v.clone() for k, v in state.items()}, 5 + i) for i in range(7)]
    strategy = _strategy(case.split("/")[0], RULES[case])
    assert isinstance(strategy, RobustAggregate)
    robust = strategy.aggregate(state, uploads).global_state
    plain = DataVolumeAverage().aggregate(state, uploads).global_state
    assert robust.keys() == plain.keys()
    for k in plain:
        assert robust[k].dtype == plain[k].dtype and torch.equal(robust[k], plain[k]), k


def test_hand_computed_krum_median_and_trimmed_mean():
    # one coordinate pair (v, -v) per upload; 100 is the outlier. Squared distances (x2 for the pair) between
    # 0, 1, 2.5, 5: Krum (f=1) scores each upload by its n - f - 2 = 2 nearest: 0 -> 2*(1 + 6.25),
    # 1 -> 2*(1 + 2.25), 2.5 -> 2*(2.25 + 6.25), 5 -> 2*(6.25 + 16): Krum picks 1, Multi-Krum (keep 3) averages
    # 0, 1 and 2.5
    values = [0.0, 1.0, 2.5, 5.0, 100.0]
    expected = {("robust-krum", 0): 1.0, ("robust-krum", 3): 3.5 / 3, ("robust-median", None): 2.5,
                ("robust-trimmed-mean", None): (1.0 + 2.5 + 5.0) / 3}
    for (name, keep), want in expected.items():
        options = {"f": 1, "keep": keep} if name == "robust-krum" else {"fraction": 0.2} if "trimmed" in name else {}
        out = _strategy(name, options).aggregate({}, _uploads(values)).global_state
        assert torch.allclose(out["w"], torch.tensor([want, -want])), (name, keep, out["w"])
        assert out["bn.num_batches_tracked"] == 0  # integers: the heaviest upload's (the first on ties)
    plain = DataVolumeAverage().aggregate({}, _uploads(values)).global_state["w"]
    assert torch.allclose(plain, torch.tensor([21.7, -21.7]))  # what the outlier does to a plain mean


def test_multi_krum_is_the_papers_unweighted_mean_of_the_kept_uploads():
    """A client that lies about its sample count does not steer Multi-Krum's mean (issue 39): the five kept
    uploads average to (0 + .1 + .2 + .15 + .05) / 5 = 0.1, whatever counts they report (weighted: 0.1995)."""
    uploads = _uploads([0.0, 0.1, 0.2, 0.15, 0.05, 50.0], [1, 1, 1000, 1, 1, 1])
    out = _strategy("robust-krum", {"f": 1, "keep": 5}).aggregate({}, uploads).global_state["w"]
    assert torch.allclose(out, torch.tensor([0.1, -0.1]), atol=1e-7), out


@pytest.mark.parametrize("name, options, n, says", [
    ("robust-krum", {"f": 1}, 4, "more than 2f + 2 = 4 clients per round for f = 1 (a round aggregates 4)"),
    ("robust-krum", {"f": 1, "keep": 2}, 4, "more than 2f + 2 = 4"),
    ("robust-bulyan", {"f": 1}, 6, "at least 4f + 3 = 7 clients per round for f = 1 (a round aggregates 6)"),
    ("robust-trimmed-mean", {"fraction": 0.2}, 3, "int(fraction * n) = int(0.2 * 3) = 0 values per side"),
])
def test_every_rule_checks_n_on_the_uploads_it_aggregates(name, options, n, says):
    """Configured for more clients, a round that aggregates fewer uploads is refused in privreid's one line, never
    Krum's silent single upload, Bulyan's Flower error or a trimmed mean that trims nothing (issue 39)."""
    with pytest.raises(ConfigError) as info:
        _strategy(name, options).aggregate({}, _uploads([float(v) for v in range(n)]))
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_bulyan_ignores_one_outlier_among_seven():
    out = _strategy("robust-bulyan", {"f": 1}).aggregate({}, _uploads([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 1e6])).global_state
    assert 0.0 <= float(out["w"][0]) <= 5.0


def test_norm_bounding_clips_each_update_and_weak_dp_adds_the_stated_noise():
    g = {"w": torch.zeros(10000), "bn.running_mean": torch.zeros(2)}
    big = Upload("a", {"w": torch.full((10000,), 0.1), "bn.running_mean": torch.ones(2)}, 1)  # norm 10
    small = Upload("b", {"w": torch.full((10000,), -0.001), "bn.running_mean": torch.ones(2)}, 1)  # norm 0.1
    out = BoundedNorm(DataVolumeAverage(), 1.0, 0.0, {"w"}).aggregate(g, [big, small]).global_state
    assert torch.allclose(out["w"], torch.full((10000,), (0.01 - 0.001) / 2))  # a clipped to norm 1, b as sent
    assert torch.equal(out["bn.running_mean"], torch.ones(2))  # buffers are not clipped
    torch.manual_seed(0)
    noisy = BoundedNorm(DataVolumeAverage(), 1.0, 0.01, {"w"}).aggregate(g, [big, small]).global_state
    assert abs(float((noisy["w"] - out["w"]).std()) - 0.01) < 0.0005
    assert torch.equal(noisy["bn.running_mean"], out["bn.running_mean"])


def test_the_support_matrix_agrees_with_what_the_wrapper_refuses():
    from privreid.federated.registry import available_methods

    defense = get_defense("robust-median")
    for name in available_methods():
        cfg = RunConfig(federation=FederationConfig(method=name),
                        robustness=RobustnessConfig(defenses={"robust-median": {}}))
        supported = defense.supports(get_method(name)).startswith("yes")
        try:
            defense.wrap(get_method(name), cfg).strategy(cfg)
            refused = False
        except ConfigError:
            refused = True
        assert supported != refused or defense.supports(get_method(name)).startswith("n/a"), name
    assert defense.supports(get_method("fedpav-cdw")).startswith("no (its server aggregates with")


def test_a_robust_rule_does_not_replace_what_client_dp_made_of_the_mean():
    cfg = RunConfig(privacy=PrivacyConfig(client_dp=True, clip=1.0, noise_multiplier=1.0),
                    robustness=RobustnessConfig(defenses={"robust-median": {}}))
    with pytest.raises(ConfigError, match="replaces a plain mean of the uploads; 'fedpav' aggregates with "
                                          "ClientLevelDP"):
        apply_defenses(get_method("fedpav"), cfg).strategy(cfg)


def test_a_median_run_records_its_defense(tiny_synth, tmp_path):
    from privreid.training import train_run

    cfg = tiny_config(tiny_synth, rounds=1, defenses={"robust-median": {}, "norm-bound": {"bound": 5.0}})
    summary = train_run(cfg, tmp_path / "run", progress=False, echo=lambda s: None)
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["privacy"]["server_defenses"] == {"robust-median": {}, "norm-bound": {"bound": 5.0, "buffers": False}}
    assert summary["privacy"]["server_defenses"] == written["privacy"]["server_defenses"]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (clipped,) = [r for r in records if r.get("scope") == "defense"]  # the median selects no client: no record
    assert clipped["round"] == 1 and clipped["defense"] == "norm-bound" and set(clipped) == {
        "round", "scope", "defense", "clipped"}
