import pytest
import torch

from privreid.federated.policy import CLASSIFIER_LOCAL, NOTHING_SHARED, clone_state, state_nbytes
from privreid.federated.strategy import DataVolumeAverage, KeepGlobal, Upload, weighted_average


def up(name, n, w, count=3):
    return Upload(name, {"w": torch.tensor(w, dtype=torch.float32), "bn.num_batches_tracked": torch.tensor(count)}, n)


def test_data_volume_average_matches_hand_computation():
    # FedPav Alg. 1 line 7: n = 10 + 30 -> weights 0.25 / 0.75
    out = DataVolumeAverage().aggregate({}, [up("a", 10, [1.0, 2.0], 5), up("b", 30, [3.0, 6.0], 9)]).global_state
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))
    assert out["w"].dtype == torch.float32
    # integer buffers are taken from the heaviest client, not averaged
    assert out["bn.num_batches_tracked"].item() == 9


def test_aggregate_is_pure():
    a, b = up("a", 1, [1.0]), up("b", 1, [3.0])
    before = (a.state["w"].clone(), b.state["w"].clone())
    out = DataVolumeAverage().aggregate({"w": torch.zeros(1)}, [a, b]).global_state
    out["w"] += 100
    assert torch.equal(a.state["w"], before[0]) and torch.equal(b.state["w"], before[1])


def test_weighted_average_errors():
    with pytest.raises(ValueError, match="zero uploads"):
        weighted_average([], [])
    with pytest.raises(ValueError, match="sum to a positive"):
        weighted_average([up("a", 0, [1.0])], [0.0])
    bad = Upload("b", {"other": torch.zeros(1)}, 1)
    with pytest.raises(ValueError, match="different set of keys"):
        weighted_average([up("a", 1, [1.0]), bad], [1.0, 1.0])


def test_keep_global_returns_global():
    g = {"w": torch.ones(2)}
    assert torch.equal(KeepGlobal().aggregate(g, [up("a", 1, [5.0, 5.0])]).global_state["w"], g["w"])


def test_policies_split_state():
    state = {"backbone.conv1.weight": torch.zeros(2), "neck.fc.bias": torch.zeros(3), "classifier.weight": torch.zeros(4)}
    assert set(CLASSIFIER_LOCAL.shared(state)) == {"backbone.conv1.weight", "neck.fc.bias"}
    assert set(CLASSIFIER_LOCAL.local(state)) == {"classifier.weight"}
    assert NOTHING_SHARED.shared(state) == {}
    assert state_nbytes(state) == (2 + 3 + 4) * 4
    copy = clone_state(state)
    copy["neck.fc.bias"] += 1
    assert state["neck.fc.bias"].sum() == 0


# ----------------------------------------------------------------------------- streaming


def _streaming_strategies():
    from privreid.defenses.beta_noise.mechanism import NoisyAggregate
    from privreid.defenses.client_dp.mechanism import ClientLevelDP
    from privreid.federated.methods.dppt import DPPTAggregate
    from privreid.federated.strategy import UniformAverage

    return {"volume": DataVolumeAverage(), "uniform": UniformAverage(), "dppt": DPPTAggregate(),
            "client-dp": ClientLevelDP(1.0, 0.5, trainable={"w"}),
            "beta": NoisyAggregate(DataVolumeAverage(), 0.1, {"w"})}


@pytest.mark.parametrize("name", sorted(_streaming_strategies()))
def test_streaming_strategies_drop_each_upload_once_folded(name):
    import gc
    import weakref

    strategy = _streaming_strategies()[name]
    assert not strategy.needs_all_uploads
    g = {"w": torch.zeros(4), "bn.num_batches_tracked": torch.tensor(0)}
    acc = strategy.accumulator(g)
    refs = []
    for i in range(3):
        upload = up(f"c{i}", i + 1, [float(i)] * 4)
        refs.append(weakref.ref(upload.state["w"]))
        acc.add(upload)
        del upload
    gc.collect()
    assert all(r() is None for r in refs)  # the accumulator kept no upload tensor
    torch.manual_seed(0)
    streamed = acc.result().global_state
    torch.manual_seed(0)
    listed = strategy.aggregate(g, [up(f"c{i}", i + 1, [float(i)] * 4) for i in range(3)]).global_state
    assert streamed.keys() == listed.keys() and all(torch.equal(streamed[k], listed[k]) for k in streamed)


def test_strategies_needing_every_upload_keep_the_list_and_aggregate_once():
    from privreid.federated.strategy import KeepUploads, RoundResult, Strategy

    calls = []

    class Median(Strategy):  # not linear: needs every upload
        def aggregate(self, global_state, uploads):
            calls.append([u.client for u in uploads])
            return RoundResult({"w": torch.stack([u.state["w"] for u in uploads]).median(dim=0).values})

    strategy = Median()
    assert strategy.needs_all_uploads
    acc = strategy.accumulator({})
    assert isinstance(acc, KeepUploads)
    for i, w in enumerate([1.0, 9.0, 2.0]):
        acc.add(up(f"c{i}", 1, [w]))
    assert calls == [] and acc.result().global_state["w"].item() == 2.0 and calls == [["c0", "c1", "c2"]]
    with pytest.raises(NotImplementedError, match="neither"):
        Strategy().accumulator({})
