import pytest
import torch

from privreid.federated.policy import CLASSIFIER_LOCAL, NOTHING_SHARED, clone_state, state_nbytes
from privreid.federated.strategy import DataVolumeAverage, KeepGlobal, Upload, weighted_average


def up(name, n, w, count=3):
    return Upload(name, {"w": torch.tensor(w, dtype=torch.float32), "bn.num_batches_tracked": torch.tensor(count)}, n)


def test_data_volume_average_matches_hand_computation():
    # FedPav Alg. 1 line 7: n = 10 + 30 -> weights 0.25 / 0.75
    out = DataVolumeAverage().aggregate({}, [up("a", 10, [1.0, 2.0], 5), up("b", 30, [3.0, 6.0], 9)])
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))
    assert out["w"].dtype == torch.float32
    # integer buffers are taken from the heaviest client, not averaged
    assert out["bn.num_batches_tracked"].item() == 9


def test_aggregate_is_pure():
    a, b = up("a", 1, [1.0]), up("b", 1, [3.0])
    before = (a.state["w"].clone(), b.state["w"].clone())
    out = DataVolumeAverage().aggregate({"w": torch.zeros(1)}, [a, b])
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
    assert torch.equal(KeepGlobal().aggregate(g, [up("a", 1, [5.0, 5.0])])["w"], g["w"])


def test_policies_split_state():
    state = {"backbone.conv1.weight": torch.zeros(2), "neck.fc.bias": torch.zeros(3), "classifier.weight": torch.zeros(4)}
    assert set(CLASSIFIER_LOCAL.shared(state)) == {"backbone.conv1.weight", "neck.fc.bias"}
    assert set(CLASSIFIER_LOCAL.local(state)) == {"classifier.weight"}
    assert NOTHING_SHARED.shared(state) == {}
    assert state_nbytes(state) == (2 + 3 + 4) * 4
    copy = clone_state(state)
    copy["neck.fc.bias"] += 1
    assert state["neck.fc.bias"].sum() == 0
