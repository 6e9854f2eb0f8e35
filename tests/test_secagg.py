"""Secure aggregation: the protocol on Flower's primitives, the strategy wrapper, the support matrix, refusals."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint
from privreid.cli import app
from privreid.config import RunConfig
from privreid.data.catalog import federation_for_config
from privreid.defenses import PrivacyLedger
from privreid.defenses.client_dp.mechanism import ClientLevelDP
from privreid.defenses.secure_aggregation.mechanism import SecureAggregate
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.federated.methods.dppt import DPPTAggregate
from privreid.defenses.registry import get_defense
from privreid.federated.registry import available_methods, get_method
from privreid.flower.messages import FlowerRunError
from privreid.federated.strategy import DataVolumeAverage, Strategy, UniformAverage, Upload
from privreid.defenses.secure_aggregation.protocol import Parameters, secure_sum

from conftest import tiny_config
from privreid.composition import build_run

Q = 2**22


def vectors(names, seed=0, scale=0.1):
    rng = np.random.default_rng(seed)
    return {n: [rng.normal(0, scale, (40, 5)), rng.normal(0, scale, (3,))] for n in names}


def grid_weight(w, max_weight):
    return round(w / max_weight * Q) / Q


def test_weighted_mean_within_the_quantisation_bound_and_weights_summed():
    names = ["a", "b", "c", "d", "e"]
    vec = vectors(names)
    w = dict(zip(names, [10.0, 30.0, 5.0, 20.0, 7.0]))
    params = Parameters(num_shares=3, threshold=2, max_weight=30.0)  # SecAgg+ ring: 1 neighbour each side
    res = secure_sum({n: (vec[n], w[n], [], []) for n in names}, params, seed=3)
    q = {n: grid_weight(w[n], 30.0) for n in names}
    exact = [sum(q[n] * vec[n][i] for n in names) / sum(q.values()) for i in range(2)]
    err = max(np.abs(res.mean[i] - exact[i]).max() for i in range(2))
    assert res.error_bound == pytest.approx(5 * (16 / Q) / (sum(q.values())))
    assert 0 < err <= res.error_bound
    assert res.total_weight == pytest.approx(72.0, abs=1e-5) and res.saturated == 0
    assert res.values == 5 * 203 and res.survivors == names and res.dropped == []
    # deterministic for a seed (stochastic rounding is seeded; masks cancel), different for another seed
    again = secure_sum({n: (vec[n], w[n], [], []) for n in names}, params, seed=3)
    other = secure_sum({n: (vec[n], w[n], [], []) for n in names}, params, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(res.mean, again.mean))
    assert not all(np.array_equal(a, b) for a, b in zip(res.mean, other.mean))


def test_masked_vectors_hide_the_inputs(monkeypatch):
    """What the server receives from one client is uniform-looking noise, not its quantised update."""
    from privreid.defenses.secure_aggregation import protocol

    seen = []
    original = protocol._Node.masked_vector

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(protocol._Node, "masked_vector", spy)
    zero = {n: ([np.zeros((1000,))], 1.0, [], []) for n in "abc"}
    res = secure_sum(zero, Parameters(num_shares=3, threshold=2), seed=0)
    assert np.abs(res.mean[0]).max() <= res.error_bound
    for masked in seen:  # a zero update quantises to Q/2 everywhere; masked, it spreads over [0, 2**32)
        values = masked[1]
        assert values.min() >= 0 and values.max() < 2**32 and np.unique(values).size > 990
        assert abs(values.mean() / 2**32 - 0.5) < 0.05


def test_dropout_after_key_sharing_is_recovered_by_the_shares():
    names = ["a", "b", "c", "d"]
    vec = vectors(names, seed=1)
    params = Parameters(num_shares=4, threshold=3)
    res = secure_sum({n: (vec[n], 1.0, [], []) for n in names}, params, seed=0, dropped=frozenset({"c"}))
    exact = [sum(vec[n][i] for n in "abd") / 3 for i in range(2)]
    assert res.survivors == ["a", "b", "d"] and res.dropped == ["c"]
    assert max(np.abs(res.mean[i] - exact[i]).max() for i in range(2)) <= res.error_bound
    assert res.total_weight == pytest.approx(3.0)
    with pytest.raises(RuntimeError, match="fewer than the threshold"):
        secure_sum({n: (vec[n], 1.0, [], []) for n in names}, params, seed=0, dropped=frozenset({"c", "d"}))


def test_saturation_is_counted_not_silent():
    vec = {"a": [np.array([0.5, 20.0, -9.0])], "b": [np.array([0.1, 0.2, 0.3])]}
    res = secure_sum({n: (v, 1.0, [], []) for n, v in vec.items()}, Parameters(2, 2), seed=0)
    assert res.saturated == 2 and res.values == 6
    assert res.mean[0][1] == pytest.approx((8.0 + 0.2) / 2, abs=res.error_bound)  # clipped at the range


def test_extras_are_averaged_over_their_senders():
    extras = {"a": ([np.zeros(1)], 1.0, [np.array([1.0, 2.0]), np.zeros(2)], [np.array([1, 0])]),
              "b": ([np.zeros(1)], 1.0, [np.array([3.0, 4.0]), np.array([5.0, 6.0])], [np.array([1, 1])])}
    res = secure_sum(extras, Parameters(2, 2), seed=0)
    assert res.extra_count[0].tolist() == [2, 1]
    np.testing.assert_allclose(res.extra_sum[0], [4.0, 6.0], atol=2 * 16 / Q)
    np.testing.assert_allclose(res.extra_sum[1], [5.0, 6.0], atol=2 * 16 / Q)


@pytest.mark.parametrize("params,clients,match", [
    (Parameters(3, 2), 1, "at least 2 clients"),
    (Parameters(3, 4), 5, r"threshold \(4\) must lie in \[2, shares = 3\]"),
    (Parameters(4, 2), 3, "needs at least 4 clients"),
    (Parameters(4, 2), 6, "must be odd"),
    (Parameters(3, 2, quantization_range=2**30), 5, "overflow the modulus"),
])
def test_bad_parameters(params, clients, match):
    with pytest.raises(ConfigError, match=match):
        params.check(clients)


# ----------------------------------------------------------------------------- the strategy wrapper
class Recorder(Strategy):
    """Records what the server's method logic receives."""

    def __init__(self, inner):
        self.inner, self.received = inner, []

    def upload_weight(self):  # the strategy contract: a wrapper states the weight of the mean it wraps
        return self.inner.upload_weight()

    def aggregate(self, global_state, uploads):
        self.received.append(uploads)
        return self.inner.aggregate(global_state, uploads)


def states(seed=0):
    g = torch.Generator().manual_seed(seed)
    glob = {"w": torch.randn(6, 4, generator=g), "bn.num_batches_tracked": torch.tensor(5)}
    ups = [Upload(f"c{i}", {"w": glob["w"] + 0.05 * torch.randn(6, 4, generator=g),
                            "bn.num_batches_tracked": torch.tensor(9 + i)}, n) for i, n in enumerate((12, 40, 7))]
    return glob, ups


def test_wrapper_gives_the_inner_strategy_one_aggregate_upload(tiny_synth):
    glob, ups = states()
    recorder = Recorder(DataVolumeAverage())
    secure = SecureAggregate(recorder, frozenset(glob), tiny_config(tiny_synth, secure_aggregation=True))
    result = secure.aggregate(glob, ups)
    out, (report,) = result.global_state, result.records
    (only,) = recorder.received[0]
    assert only.client == "secure-aggregate" and only.num_samples == pytest.approx(59.0, abs=1e-4)
    plain = DataVolumeAverage().aggregate(glob, ups).global_state
    bound = report["quantisation_error_bound"]
    weight_rounding = 2 * 0.05 * 4 * (0.5 / Q) * 40 / (7 / 40)  # |q_k - n_k/max| <= 1/(2Q), |Delta| < 4 sigma
    assert (out["w"] - plain["w"]).abs().max() <= bound + weight_rounding
    assert not torch.equal(out["w"], plain["w"])
    assert out["bn.num_batches_tracked"] == 5  # integer buffers keep the server's value
    assert report["scope"] == "secagg" and report["clients"] == 3  # the round's record, in the result


def test_wrapper_refuses_strategies_that_are_not_weighted_means(tiny_synth):
    from privreid.federated.methods.fedpav_variants import WeightedAverage, cosine_distance_weights

    with pytest.raises(ConfigError, match="not a weighted mean"):
        SecureAggregate(WeightedAverage(cosine_distance_weights), frozenset(), tiny_config(tiny_synth))


def test_dppt_centres_are_averaged_over_the_clients_that_hold_the_identity(tiny_synth):
    glob = {"w": torch.zeros(3), "mrb/synthA/1": torch.ones(4)}
    ups = [Upload("a", {"w": torch.tensor([1.0, 0, 0]), "mrb/synthA/1": torch.full((4,), 3.0),
                        "mrb/synthA/2": torch.full((4,), 1.0)}, 10),
           Upload("b", {"w": torch.tensor([0, 1.0, 0]), "mrb/synthA/2": torch.full((4,), 2.0),
                        "mrb/synthB/7": torch.full((4,), -1.0)}, 30)]
    plain = DPPTAggregate().aggregate(glob, ups).global_state
    secure = SecureAggregate(DPPTAggregate(), frozenset({"w"}), tiny_config(tiny_synth)).aggregate(glob,
                                                                                                     ups).global_state
    assert secure.keys() == plain.keys()
    for k in plain:
        torch.testing.assert_close(secure[k], plain[k], atol=1e-5, rtol=0)


def test_distributed_dp_noise_totals_central_dp_noise(tiny_synth):
    """Each of m clients adds N(0, (ZS)^2/m): the mean carries N(0, (ZS/m)^2), DP-FedAvg's noise."""
    z, s, m = 2.0, 0.5, 4
    glob = {"w": torch.zeros(40000), "buf": torch.ones(3)}
    ups = [Upload(f"c{i}", {"w": torch.zeros(40000), "buf": torch.full((3,), 7.0)}, 10 * (i + 1)) for i in range(m)]
    cfg = tiny_config(tiny_synth, client_dp=True, clip=s, noise_multiplier=z, secure_aggregation=True)
    secure = SecureAggregate(ClientLevelDP(s, z, {"w"}), frozenset(glob), cfg, trainable=frozenset({"w"}))
    torch.manual_seed(0)
    out = secure.aggregate(glob, ups).global_state
    assert out["w"].std().item() == pytest.approx(z * s / m, rel=0.02)
    assert abs(out["w"].mean().item()) < 4 * z * s / m / 200
    assert torch.equal(out["buf"], glob["buf"])  # not privatised, so not aggregated (as under central DP)


def test_same_epsilon_as_central_client_dp(tiny_synth):
    clients = federation_for_config(tiny_config(tiny_synth)).clients
    dp = dict(client_dp=True, clip=1.0, noise_multiplier=1.0, delta=1e-2)
    central = PrivacyLedger(tiny_config(tiny_synth, **dp), clients, 2)
    distributed = PrivacyLedger(tiny_config(tiny_synth, secure_aggregation=True, **dp), clients, 2)
    for r in (1, 5):
        assert central.after_round(r) == distributed.after_round(r)
    statement = distributed.summary(distributed.after_round(5))
    assert statement["secure_aggregation"]["distributed_dp"] is True
    assert "Not an individual update" in statement["server_view"]
    assert "in the clear" in central.summary([])["server_view"]


# ----------------------------------------------------------------------------- support matrix
def expected_support(name, tiny_synth):
    """Secure aggregation's row for method ``name``, from the strategy contract rather than the declaration:
    ``yes`` exactly when the method's server strategy is a weighted mean of the uploads (``upload_weight``)."""
    method = get_method(name)
    if not method.communicates or not method.has_global_model:
        return "n/a"
    return "no" if method.strategy(tiny_config(tiny_synth, method=name)).upload_weight() is None else "yes"


def test_support_matrix_is_declared_and_printed(tiny_synth):
    expected = {name: expected_support(name, tiny_synth) for name in available_methods()}
    assert set(expected.values()) == {"yes", "no", "n/a"}
    for name, want in expected.items():
        assert get_defense("secure-aggregation").supports(get_method(name)).split(" ")[0] == want, name
    res = CliRunner().invoke(app, ["methods"])
    assert res.exit_code == 0
    lines = res.output.splitlines()
    for name, want in expected.items():
        i = next(i for i, line in enumerate(lines) if line.startswith(name + " "))
        rows = [line.strip() for line in lines[i + 1:i + 5]]
        assert any(row.startswith(f"secure-aggregation: {want}") for row in rows), name


# ----------------------------------------------------------------------------- end to end
TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "1",
        "--device", "cpu", "--quiet", "--test-domains", "synthC", "--rounds", "1"]


@pytest.mark.parametrize("extra,match", [
    (["--method", "fedpav-cdw"], "method 'fedpav-cdw' cannot run on the sum of the uploads"),
    (["--method", "centralized"], "needs a federated method"),
    (["--secagg-threshold", "3"], "2 clients per round is fewer than the reconstruction threshold 3"),
    (["--secagg-shares", "2", "--secagg-threshold", "3"], "above --secagg-shares 2"),
    (["--client-fraction", "0.5"], "at least 2 clients per round"),
    (["--secagg-clip", "0"], "secagg_clip must be > 0"),
    (["--secagg-quantization", str(2**31)], "2 clients x quantisation range 2147483648 overflow the modulus"),
])
def test_bad_input_is_one_line_before_anything_is_written(tiny_synth, tmp_path, extra, match):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", "--data", str(tiny_synth), *TINY, "--secure-aggregation", *extra,
                                   "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and match in res.output and res.output.count("\n") == 1
    assert not out.exists()


def test_a_clipping_range_the_updates_exceed_is_reported_as_saturation_not_an_overflow(tiny_synth, tmp_path):
    """Updates beyond --secagg-clip are clipped and counted (metrics.jsonl, summary.json); nothing wraps around
    the modulus: the global model moves by at most m c (each client's pre-scaled update lies in [-c, c], the
    weights' sum is at least max_weight) plus the quantisation bound."""
    clip = 1e-7
    cfg = tiny_config(tiny_synth, rounds=1, max_steps_per_epoch=1, secure_aggregation=True, secagg_clip=clip)
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path / "run", progress=False, log=lambda s: None, build=build_run)
    init = {k: v.clone() for k, v in engine.global_state.items()}
    engine.run()
    recs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (rec,) = [r for r in recs if r["scope"] == "secagg"]
    assert rec["clients"] == 2 and rec["saturated"] > 0 and rec["values"] > 10**6
    assert rec["saturated"] == round(rec["saturated_fraction"] * rec["values"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]["secure_aggregation"]
    assert summary["saturated_values"] == rec["saturated"] and summary["clipping_range"] == clip
    state = load_checkpoint(tmp_path / "run" / "ckpt.pt")["global_state"]
    worst = max((state[k].double() - v.double()).abs().max().item() for k, v in init.items() if v.is_floating_point())
    assert 0 < worst <= 2 * clip + rec["quantisation_error_bound"] + 1e-6  # + float32 rounding of the weights


def test_settings_need_the_flag(tiny_synth, tmp_path):
    res = CliRunner().invoke(app, ["train", "--data", str(tiny_synth), *TINY, "--secagg-shares", "3",
                                   "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--secagg-shares given without --secure-aggregation" in res.output


def test_one_round_matches_the_plain_run_within_the_bound(tiny_synth, tmp_path):
    runs = {}
    for name, flags in (("plain", {}), ("secure", {"secure_aggregation": True})):
        cfg = tiny_config(tiny_synth, rounds=1, max_steps_per_epoch=1, **flags)
        FederatedEngine(cfg, federation_for_config(cfg), tmp_path / name, progress=False, log=lambda s: None, build=build_run).run()
        runs[name] = load_checkpoint(tmp_path / name / "ckpt.pt")
    recs = [json.loads(line) for line in (tmp_path / "secure" / "metrics.jsonl").read_text().splitlines()]
    (secagg,) = [r for r in recs if r["scope"] == "secagg"]
    assert secagg["round"] == 1 and secagg["clients"] == 2 and secagg["saturated"] == 0
    plain, secure = runs["plain"]["global_state"], runs["secure"]["global_state"]
    worst = max((secure[k].double() - plain[k].double()).abs().max().item()
                for k in plain if plain[k].is_floating_point())
    # the quantisation bound plus the weight grid (Q ~ 4e6: relative 1e-7 of an update) and float32 rounding
    assert 0 < worst <= secagg["quantisation_error_bound"] + 1e-5
    summary = json.loads((tmp_path / "secure" / "summary.json").read_text())
    assert summary["privacy"]["secure_aggregation"]["saturated_values"] == 0
    assert "Not an individual update" in summary["privacy"]["server_view"]


# ----------------------------------------------------------------------------- inversion of the aggregate
@pytest.fixture(scope="module")
def fedpav_ckpt(tiny_synth, tmp_path_factory):
    cfg = tiny_config(tiny_synth, "fedpav", rounds=1, max_steps_per_epoch=1, secure_aggregation=True)
    out = tmp_path_factory.mktemp("fedpav-secagg")
    FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, log=lambda s: None, build=build_run).run()
    return out / "ckpt.pt"


def test_invert_aggregate_rows_and_the_single_upload_reference(fedpav_ckpt, tmp_path):
    out = tmp_path / "inv"
    res = CliRunner().invoke(app, ["invert", "--model", str(fedpav_ckpt), "--threat", "aggregate", "--clients", "1,2",
                                   "--clients", "3", "--iterations", "3", "--no-defended", "--device", "cpu",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "aggregate of 3" in res.output and "single upload" in res.output
    reports = {d: json.loads((out / d / "metrics.json").read_text()) for d in ("single", "m1", "m2", "m3")}
    # without defenses the aggregate of one client is the single upload, reconstruction for reconstruction
    assert reports["m1"]["subjects"][0]["attack"] == reports["single"]["subjects"][0]["attack"]
    assert reports["m3"]["settings"]["clients"] == 3 and len(reports["m3"]["subjects"][0]["aggregated_with"]) == 2
    assert reports["m2"]["subjects"][0]["attack"] != reports["m1"]["subjects"][0]["attack"]
    assert reports["m2"]["subjects"][0]["client"] not in reports["m2"]["subjects"][0]["aggregated_with"][0]


def test_invert_aggregate_without_clients_sums_the_runs_clients_per_round(fedpav_ckpt, tmp_path):
    out = tmp_path / "inv"
    res = CliRunner().invoke(app, ["invert", "--model", str(fedpav_ckpt), "--threat", "aggregate", "--iterations",
                                   "2", "--no-defended", "--device", "cpu", "--out", str(out)])
    assert res.exit_code == 0, res.output
    # the run aggregated 2 clients a round (synthA, synthB): the reference and the sum of 2, nothing else
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["m2", "single"]
    assert json.loads((out / "m2" / "metrics.json").read_text())["settings"]["clients"] == 2


def test_aggregate_observation_is_the_sum_of_the_steps(fedpav_ckpt):
    from privreid.inversion import NO_DEFENSE
    from privreid.inversion.aggregate import BASE_THREAT, aggregate_observation
    from privreid.inversion.campaign import attacked_model, load_targets
    from privreid.inversion.observation import leak_bottleneck_feature
    from privreid.inversion.threat_models import observe
    from privreid.losses import identity_loss

    (target,) = load_targets([fedpav_ckpt])
    net, shared = attacked_model(target, "synthA", BASE_THREAT, torch.device("cpu"))
    images = torch.rand(2, 3, 32, 16, generator=torch.Generator().manual_seed(0))
    loss_fn = identity_loss(0.1)
    single = [observe(net, images[i], i, threat=BASE_THREAT, shared=shared, loss_fn=loss_fn).grads for i in (0, 1)]
    total = aggregate_observation([(net, images[0], 0), (net, images[1], 1)], shared=shared, loss_fn=loss_fn,
                                  defense=NO_DEFENSE,
                                  generator=torch.Generator())
    for k in single[0]:
        torch.testing.assert_close(total.grads[k], single[0][k] + single[1][k])
    # one step leaks its pooled feature exactly; the sum leaks a mixture of both, equal to neither (on the
    # render-2 data's model the two noise images' features are so alike that the mixture's cosine to either
    # rounds to 1, so the test compares values: they differ by about 1e-3, float noise is below 1e-6)
    h0, h1 = leak_bottleneck_feature(single[0]), leak_bottleneck_feature(single[1])
    mix = leak_bottleneck_feature(total.grads)
    assert (mix - h0).abs().max() > 1e-4 and (mix - h1).abs().max() > 1e-4


def test_client_dp_share_per_client(tiny_synth):
    from privreid.inversion.aggregate import parse_clients
    from privreid.inversion.defenses import defense_as_trained

    cfg = tiny_config(tiny_synth, client_dp=True, clip=2.0, noise_multiplier=3.0)
    assert defense_as_trained(cfg, aggregated=4).noise_multiplier == pytest.approx(1.5)  # (Z S)^2 / m per client
    assert defense_as_trained(cfg, aggregated=4).clip_norm == 2.0
    assert parse_clients(["8,1", "2"]) == [1, 2, 8]
    with pytest.raises(ConfigError, match="positive integers"):
        parse_clients(["0"])


def test_invert_bad_clients_options(fedpav_ckpt, tmp_path):
    for args, match in ((["--threat", "shared", "--clients", "2"], "--clients is for --threat aggregate"),
                        (["--threat", "aggregate", "--clients", "3,x"], "positive integers"),
                        (["--threat", "aggregate", "--clients", "99"], "has only")):
        res = CliRunner().invoke(app, ["invert", "--model", str(fedpav_ckpt), *args, "--out", str(tmp_path / "x")])
        assert res.exit_code == 2 and res.output.startswith("error: ") and match in res.output, res.output
        assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------- Flower (loopback Grid, one process)
@pytest.fixture(scope="module")
def synth3(tmp_path_factory):
    """Three training domains (three sites) and a held-out one, 32x16."""
    from privreid.data.synthetic import SynthConfig, generate_synthetic

    from conftest import TINY_SYNTH

    return generate_synthetic(tmp_path_factory.mktemp("synth3") / "s", SynthConfig(**{**TINY_SYNTH, "num_domains": 4}))


def secure_flower_run(root, tmp, cfg, *, drop=None, lose_context=None, **settings):
    from privreid.flower.client_app import app as client_app
    from privreid.flower.loopback import LoopbackGrid
    from privreid.flower.server_app import ServerSettings, run_server

    nodes = {10 + i: {"data": str(root / f"synth{d}"), "state-dir": str(tmp / f"state-{d}")} for i, d in enumerate("ABC")}
    grid = LoopbackGrid(client_app, nodes, drop=drop, lose_context=lose_context)
    summary = run_server(grid, ServerSettings(cfg, tmp / "flower", sites=3, poll=0.0, **settings), log=lambda m: None)
    return grid, summary


def flower_cfg(root, **train):
    cfg = tiny_config(root, **{"rounds": 1, "max_steps_per_epoch": 1, "secure_aggregation": True, **train})
    cfg.data.test_domains = ["synthD"]
    return cfg


def test_flower_secaggplus_gives_the_in_process_model_exactly_and_no_update_in_the_clear(synth3, tmp_path):
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

    cfg = flower_cfg(synth3)
    grid, summary = secure_flower_run(synth3, tmp_path, cfg)
    FederatedEngine(flower_cfg(synth3), federation_for_config(cfg), tmp_path / "in-process", progress=False,
                    log=lambda s: None, build=build_run).run()
    flower, inproc = load_checkpoint(tmp_path / "flower" / "ckpt.pt"), load_checkpoint(tmp_path / "in-process" / "ckpt.pt")
    # same protocol seed, same stochastic rounding per site, exact integer sums: the same model, bit for bit
    assert flower["global_state"].keys() == inproc["global_state"].keys()
    for k, v in inproc["global_state"].items():
        assert torch.equal(flower["global_state"][k], v), k
    def train_records(ckpt):  # each site's training metrics, with their types (an int stays an int)
        return sorted(((r["client"], k, type(v).__name__, v) for r in ckpt["metrics"] if r["scope"] == "train"
                       for k, v in r.items() if k != "client"))

    assert train_records(flower) == train_records(inproc) and train_records(flower)
    plain_cfg = flower_cfg(synth3)
    plain_cfg.privacy.secure_aggregation = False
    FederatedEngine(plain_cfg, federation_for_config(plain_cfg), tmp_path / "plain", progress=False,
                    log=lambda s: None, build=build_run).run()
    flower, plain = load_checkpoint(tmp_path / "flower" / "ckpt.pt"), load_checkpoint(tmp_path / "plain" / "ckpt.pt")
    (rec,) = [r for r in flower["metrics"] if r["scope"] == "secagg"]
    assert rec["runtime"] == "flower" and rec["clients"] == 3 and rec["dropped"] == [] and rec["saturated"] == 0
    worst = max((flower["global_state"][k].double() - plain["global_state"][k].double()).abs().max().item()
                for k in plain["global_state"] if plain["global_state"][k].is_floating_point())
    assert 0 < worst <= rec["quantisation_error_bound"] + 1e-5
    trains = [m for m in grid.received if m.metadata.message_type == "train"]
    assert len(trains) == 4 * 3  # setup, share keys, collect masked vectors, unmask; three sites each
    for msg in trains:  # the server's whole view of the round: no tensor, only protocol bytes and scalars
        assert all(len(r) == 0 for r in msg.content.array_records.values())
        assert RECORD_KEY_CONFIGS in msg.content.config_records
    assert "Not an individual update" in summary["privacy"]["server_view"]


def test_flower_secaggplus_with_distributed_dp_gives_the_in_process_model_exactly(synth3, tmp_path):
    cfg = flower_cfg(synth3, client_dp=True, clip=1.0, noise_multiplier=0.5)
    secure_flower_run(synth3, tmp_path, cfg)
    FederatedEngine(flower_cfg(synth3, client_dp=True, clip=1.0, noise_multiplier=0.5), federation_for_config(cfg),
                    tmp_path / "in-process", progress=False, log=lambda s: None, build=build_run).run()
    flower, inproc = load_checkpoint(tmp_path / "flower" / "ckpt.pt"), load_checkpoint(tmp_path / "in-process" / "ckpt.pt")
    for k, v in inproc["global_state"].items():  # the same noise shares too
        assert torch.equal(flower["global_state"][k], v), k


def test_flower_site_dropping_out_after_sharing_keys_is_recovered_by_the_protocol(synth3, tmp_path):
    def collect_stage_of_c(node, msg):
        configs = msg.content.config_records.get("secaggplus_configs", {})
        return node == 12 and configs.get("stage") == "collect_masked_vectors"

    grid, summary = secure_flower_run(synth3, tmp_path, flower_cfg(synth3), drop=collect_stage_of_c, min_clients=2)
    ckpt = load_checkpoint(tmp_path / "flower" / "ckpt.pt")
    (rec,) = [r for r in ckpt["metrics"] if r["scope"] == "secagg"]
    assert ckpt["round"] == 1 and rec["clients"] == 2 and rec["dropped"] == ["synthC"]
    assert [m["client"] for m in ckpt["metrics"] if m["scope"] == "train"] == ["synthA", "synthB"]
    assert all(torch.isfinite(v).all() for v in ckpt["global_state"].values() if v.is_floating_point())


@pytest.mark.slow
def test_flower_site_dropping_out_while_sharing_keys_leaves_the_same_sum_as_one_dropping_later(synth3, tmp_path):
    """A site lost at share keys never sent key shares, so nobody masked against it: the survivors' unmasked sum
    is the same integer sum as when it drops after sharing (flwr 1.41 counted it as dead at unmask and every
    surviving site failed with a KeyError)."""
    def stage_of_c(stage):
        return lambda node, msg: node == 12 and msg.content.config_records.get(
            "secaggplus_configs", {}).get("stage") == stage

    secure_flower_run(synth3, tmp_path / "early", flower_cfg(synth3), drop=stage_of_c("share_keys"), min_clients=2)
    secure_flower_run(synth3, tmp_path / "late", flower_cfg(synth3), drop=stage_of_c("collect_masked_vectors"),
                      min_clients=2)
    early, late = (load_checkpoint(tmp_path / d / "flower" / "ckpt.pt") for d in ("early", "late"))
    (rec,) = [r for r in early["metrics"] if r["scope"] == "secagg"]
    assert rec["clients"] == 2 and rec["dropped"] == ["synthC"]
    for k, v in late["global_state"].items():
        assert torch.equal(early["global_state"][k], v), k


def test_flower_sites_whose_context_push_failed_resume_secaggplus_from_their_state_dir(synth3, tmp_path):
    """flwr 1.41 stores a site's Context only if the ClientApp's last request gets through; on a loaded machine
    it timed out after the collect stage on two of three sites, which then failed to unmask ("expect
    collect_masked_vectors stage, but receive unmask stage") and aborted the round (the benchmark's failure)."""
    def after_collect_on_b_and_c(node, msg):
        configs = msg.content.config_records.get("secaggplus_configs", {})
        return node in (11, 12) and configs.get("stage") == "collect_masked_vectors"

    cfg = flower_cfg(synth3)
    grid, _ = secure_flower_run(synth3, tmp_path, cfg, lose_context=after_collect_on_b_and_c)
    assert not [m for m in grid.received if m.has_error()]
    FederatedEngine(flower_cfg(synth3), federation_for_config(cfg), tmp_path / "in-process", progress=False,
                    log=lambda s: None, build=build_run).run()
    flower, inproc = load_checkpoint(tmp_path / "flower" / "ckpt.pt"), load_checkpoint(tmp_path / "in-process" / "ckpt.pt")
    for k, v in inproc["global_state"].items():
        assert torch.equal(flower["global_state"][k], v), k
    assert not list(tmp_path.glob("state-*/secaggplus-*"))  # the secret keys leave the disk after unmask


def test_flower_secaggplus_abort_is_one_line_naming_the_dropped_sites_why_and_the_timeout(synth3, tmp_path,
                                                                                         monkeypatch):
    """synthB is lost at setup, synthC's ClientApp raises (a multi-line message) at the collect stage: one site
    is left, below the threshold of 2, and the round aborts with one line that says who dropped out, at which
    stage, why, and how long each stage waited."""
    import privreid.flower.client_app as client_app

    def setup_of_b(node, msg):
        return node == 11 and msg.content.config_records.get("secaggplus_configs", {}).get("stage") == "setup"

    real = client_app.secure_fit_reply

    def c_fails(engine, client, *args):
        if client.name == "synthC":
            raise RuntimeError("disk full\n  while writing the update")
        return real(engine, client, *args)

    monkeypatch.setattr(client_app, "secure_fit_reply", c_fails)
    with pytest.raises(FlowerRunError) as info:
        secure_flower_run(synth3, tmp_path, flower_cfg(synth3), drop=setup_of_b, round_timeout=7)
    assert str(info.value) == (
        "round 1: secure aggregation aborted: fewer than 2 sites survived to unmask; dropped: "
        "synthB (setup: NODE_UNAVAILABLE: node 11 unavailable (simulated)); "
        "synthC (collect masked vectors: CLIENT_APP_RAISED_EXCEPTION: <class 'RuntimeError'>:<'disk full while "
        "writing the update'>); each stage waits 7 s for the sites' replies (--round-timeout; raise it on a slow "
        "or loaded machine)")
    assert not (tmp_path / "flower" / "ckpt.pt").exists()


@pytest.mark.parametrize("extra,match", [
    (["--secagg-threshold", "3"], "2 clients per round is fewer than the reconstruction threshold 3"),
    (["--sites", "1"], "at least 2 clients per round"),
    (["--method", "fedarks"], "method 'fedarks' cannot run on the sum of the uploads"),
    (["--secagg-shares", "2", "--secagg-threshold", "3"], "above --secagg-shares 2"),
    (["--secagg-clip", "-1"], "secagg_clip must be > 0"),
    (["--method", "dppt", "--opt", "shared_classifier=false"], "Flower's SecAgg+ carries model updates only"),
])
def test_flower_run_refuses_bad_secure_settings_before_starting(tmp_path, extra, match):
    res = CliRunner().invoke(app, ["flower", "run", "--insecure", "--secure-aggregation", *extra,
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and res.output.startswith("error: ") and match in res.output, res.output
    assert not (tmp_path / "out").exists()


def _fitres_reply(metrics):
    from flwr.app import Message, RecordDict
    from flwr.common import Code, FitRes, Parameters as FlwrParameters, Status
    from flwr.compat.common import recorddict_compat as compat
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 0
    ask = Message(RecordDict(), 5, "train")
    ask.metadata.__dict__["_message_id"] = "ask"
    content = compat.fitres_to_recorddict(FitRes(Status(Code.OK, ""), FlwrParameters([], ""), 3, metrics), True)
    for record in content.array_records.values():  # what secaggplus_mod leaves of the parameters
        record.clear()
    return Message(content, reply_to=ask)


def test_ledger_reports_travel_as_scalar_metrics_bit_exactly():
    from privreid.defenses.secure_aggregation.flower import REPORT_PREFIX, reports_to_metrics, split_reports

    reports = {"dp_sgd/rdp_history": torch.tensor([[1 / 3, 0.0625, 7.0], [0.7, 1e-300, 3.0]], dtype=torch.float64),
               "dp_sgd/noise_multiplier": torch.tensor(1 / 7, dtype=torch.float64),
               "f32": torch.tensor([0.1, -2.5], dtype=torch.float32), "i64": torch.tensor([[2**40], [-3]]),
               "empty": torch.zeros(0, 3, dtype=torch.float64)}
    metrics = reports_to_metrics(reports)
    assert all(k.startswith(REPORT_PREFIX) and type(v) in (int, float) for k, v in metrics.items())
    assert len(metrics) == (2 + 2 + 6) + (2 + 0 + 1) + (2 + 1 + 2) + (2 + 2 + 2) + (2 + 2 + 0)  # dtype+ndim, dims, values
    plain, back = split_reports({"loss": 0.5, **metrics}, tuple(reports))
    assert plain == {"loss": 0.5} and list(back) == list(reports)
    for key, value in reports.items():
        assert back[key].dtype == value.dtype and back[key].shape == value.shape and torch.equal(back[key], value)
    with pytest.raises(FlowerRunError, match="is torch.bfloat16"):
        reports_to_metrics({"b": torch.zeros(2, dtype=torch.bfloat16)})


def test_secure_reply_gate_allows_scalar_metrics_and_the_ledgers_reports_only():
    from privreid.defenses.secure_aggregation.flower import REPORT_PREFIX, check_secure_reply, reports_to_metrics

    key = "dp_sgd/rdp_history"
    history = reports_to_metrics({key: torch.tensor([[1.0, 0.5, 4.0]], dtype=torch.float64)})
    check_secure_reply(_fitres_reply({"loss": 0.5, **history}), (key,))
    bad = {
        "no enabled defense reads": ({"loss": 0.5, **history}, ()),  # no DP-SGD in the run
        "malformed": ({k: v for k, v in history.items() if not k.endswith(":2")}, (key,)),  # a value missing
        "malformed ": ({**history, f"{REPORT_PREFIX}{key}:3": 0.1}, (key,)),  # a value beyond the shape
        "malformed  ": ({**history, f"{REPORT_PREFIX}{key}:dim0": 2.0}, (key,)),  # a non-integer dimension
        "non-scalar metric": ({"per_sample": [0.1, 0.2]}, (key,)),
        "non-scalar metric ": ({"note": "x"}, (key,)),
    }
    for match, (metrics, ledger) in bad.items():
        with pytest.raises(FlowerRunError, match=match.strip()):
            check_secure_reply(_fitres_reply(metrics), ledger)


def test_flower_secaggplus_with_dp_sgd_logs_the_in_process_epsilon_and_stops_at_the_target(synth3, tmp_path):
    """Under SecAgg+ the sites' DP-SGD accountant reports reach the server's privacy ledger as in-process: the same
    ``privacy`` records, ledger state and statement, and ``--target-epsilon`` stops the run before the round that
    would exceed it (flwr sent no reports: no epsilon was logged and the run went on past the target)."""
    from privreid.config import dp_delta
    from privreid.defenses.dp_sgd.mechanism import plan_for
    from privreid.defenses.dp_sgd.plugin import epsilon_after

    train = dict(rounds=2, dp_sgd=True, noise_multiplier=1.0, max_grad_norm=1.0)
    cfg = flower_cfg(synth3, **train)
    # the largest epsilon after one round: round 1 fits the target, round 2 would exceed it for that site
    cfg.privacy.target_epsilon = max(epsilon_after(plan_for(cfg, c.num_samples), None, dp_delta(cfg))
                                   for c in federation_for_config(cfg).clients)
    grid, summary = secure_flower_run(synth3, tmp_path, cfg)
    FederatedEngine(RunConfig.from_dict(cfg.to_dict()), federation_for_config(cfg), tmp_path / "in-process",
                    progress=False, log=lambda s: None, build=build_run).run()
    flower, inproc = load_checkpoint(tmp_path / "flower" / "ckpt.pt"), load_checkpoint(tmp_path / "in-process" / "ckpt.pt")
    assert inproc["round"] == flower["round"] == 1  # stopped by the budget
    privacy = [r for r in inproc["metrics"] if r["scope"] == "privacy"]
    assert [r["client"] for r in privacy] == ["synthA", "synthB", "synthC"] and all(r["epsilon"] > 0 for r in privacy)
    assert max(r["epsilon"] for r in privacy) == pytest.approx(cfg.privacy.target_epsilon, rel=1e-12)
    assert [r for r in flower["metrics"] if r["scope"] == "privacy"] == privacy
    assert [r for r in flower["metrics"] if r["scope"] == "train"] == [
        r for r in inproc["metrics"] if r["scope"] == "train"]
    ledger_f, ledger_i = (c["observer_state"] for c in (flower, inproc))
    reported_f, reported_i = (s["privacy"]["dp-sgd"]["reported"] for s in (ledger_f, ledger_i))
    assert reported_f.keys() == reported_i.keys() == {"synthA", "synthB", "synthC"}
    for name, entries in reported_i.items():
        for key, value in entries.items():
            assert reported_f[name][key].dtype == value.dtype and torch.equal(reported_f[name][key], value), key
    inproc_summary = json.loads((tmp_path / "in-process" / "summary.json").read_text())
    for key in ("epsilon", "epsilon_per_client", "noise_multiplier_per_client"):
        assert summary["privacy"][key] == inproc_summary["privacy"][key], key
