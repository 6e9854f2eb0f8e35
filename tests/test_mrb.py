"""Memory rectification bank (L2RW+ Eq. 3-6) and DPPT's server side, against hand computations."""

import pytest
import torch

from privreid.data.types import ClientData
from privreid.federated.methods.dppt import DPPTAggregate, identity_key
from privreid.federated.mrb import FeatureBank, global_memory, local_memory, mrb_loss, refined_centre
from privreid.federated.strategy import DataVolumeAverage, Upload


def column(*values):
    return torch.tensor(values, dtype=torch.float64).view(-1, 1)


# --------------------------------------------------------------------------- Eq. 3-4
def test_top_k_centre_rule_by_hand():
    # mean 3.25; distances 3.25, 2.25, 1.25, 6.75 -> the two closest are 2 and 1
    assert refined_centre(column(0, 1, 2, 10), k=2).item() == pytest.approx(1.5)
    # the three closest: 2, 1, 0 -> 1.0
    assert refined_centre(column(0, 1, 2, 10), k=3).item() == pytest.approx(1.0)
    # |S| >= K with K = |S|: all of them (the plain mean, Eq. 3)
    assert refined_centre(column(0, 1, 2, 10), k=4).item() == pytest.approx(3.25)
    # |S| < K: the plain mean (Eq. 4, first case)
    assert refined_centre(column(0, 1, 2), k=4).item() == pytest.approx(1.0)
    # Euclidean distance in D dimensions: mean (1, 1); (5, 5) is the outlier
    f = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [5.0, 5.0]])
    assert torch.allclose(refined_centre(f, k=4), torch.tensor([0.0, 0.0]))


def test_local_memory_per_identity():
    f = torch.tensor([[0.0], [1.0], [2.0], [10.0], [5.0], [7.0]])
    labels = torch.tensor([0, 0, 0, 0, 3, 3])
    memory = local_memory(f, labels, k=2)
    assert set(memory) == {0, 3}
    assert memory[0].item() == pytest.approx(1.5) and memory[3].item() == pytest.approx(6.0)
    with pytest.raises(ValueError):
        refined_centre(torch.zeros(0, 2), k=2)


def test_feature_bank_stores_normalised_detached_features():
    bank = FeatureBank()
    assert bank.centres(4) == {} and len(bank) == 0
    f = torch.tensor([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]], requires_grad=True)
    bank.add(f, torch.tensor([0, 0, 1]))
    bank.add(torch.tensor([[0.0, -5.0]]), torch.tensor([1]))
    centres = bank.centres(k=4)
    assert len(bank) == 4
    assert torch.allclose(centres[0], torch.tensor([0.3, 0.9]))  # mean of (0.6, 0.8) and (0, 1)
    assert torch.allclose(centres[1], torch.tensor([0.5, -0.5]))  # mean of (1, 0) and (0, -1)
    assert not centres[0].requires_grad


# --------------------------------------------------------------------------- Eq. 5
def test_global_memory_is_indicator_masked_mean_with_identities_missing():
    a = {"p1": torch.tensor([1.0, 0.0]), "p2": torch.tensor([0.0, 2.0])}
    b = {"p2": torch.tensor([0.0, 4.0]), "p3": torch.tensor([3.0, 3.0])}
    c = {"p2": torch.tensor([3.0, 0.0])}
    out = global_memory([a, b, c, {}])
    assert set(out) == {"p1", "p2", "p3"}
    assert torch.allclose(out["p1"], torch.tensor([1.0, 0.0]))  # held by one client: its centre
    assert torch.allclose(out["p2"], torch.tensor([1.0, 2.0]))  # (0+0+3)/3, (2+4+0)/3
    assert torch.allclose(out["p3"], torch.tensor([3.0, 3.0]))
    # Eq. 5 literally: zero-filled centres, indicator 1{c != 0}
    keys = ["p1", "p2", "p3"]
    dense = torch.stack([torch.stack([m.get(k, torch.zeros(2)) for k in keys]) for m in (a, b, c, {})])
    indicator = (dense != 0).any(-1, keepdim=True).float()
    eq5 = (indicator * dense).sum(0) / indicator.sum(0)
    for i, k in enumerate(keys):
        assert torch.allclose(out[k], eq5[i])


def test_global_memory_keeps_previous_centres_nobody_uploaded():
    previous = {"p1": torch.tensor([9.0]), "p4": torch.tensor([7.0])}
    out = global_memory([{"p1": torch.tensor([1.0])}, {"p1": torch.tensor([3.0])}], previous=previous)
    assert set(out) == {"p1", "p4"}
    assert out["p1"].item() == pytest.approx(2.0) and out["p4"].item() == pytest.approx(7.0)
    assert out["p4"] is not previous["p4"]


# --------------------------------------------------------------------------- Eq. 6
def test_mrb_loss_by_hand_skipping_unknown_identities():
    z = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0], [5.0, 5.0]], requires_grad=True)
    labels = torch.tensor([0, 1, 1, 2])
    centres = torch.tensor([[0.0, 3.0], [1.0, 0.0], [0.0, 0.0]])
    known = torch.tensor([True, True, False])
    loss = mrb_loss(z, labels, centres, known)
    # cos: (1,0)~(0,3) = 0; (1,1)~(1,0) = 1/sqrt2; (0,2)~(1,0) = 0; label 2 unknown -> left out
    expected = ((1 - 0) + (1 - 2 ** -0.5) + (1 - 0)) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert torch.equal(z.grad[3], torch.zeros(2))  # the unknown identity's sample is untouched
    none = torch.randn(2, 2, requires_grad=True)
    zero = mrb_loss(none, torch.tensor([0, 0]), centres, torch.tensor([False, True, True]))
    zero.backward()
    assert zero.item() == 0.0 and torch.equal(none.grad, torch.zeros(2, 2))


# --------------------------------------------------------------------------- server and download
def client(name, domain, source_pids):
    train = [(f"{name}/{i}.jpg", label, 0) for label in range(len(source_pids)) for i in range(2)]
    return ClientData(name=name, domain=domain, train=train, source_pids=source_pids)


def test_identity_keys_pool_cameras_of_a_domain_only():
    cam0, cam1 = client("A/c0", "A", [3, 5]), client("A/c1", "A", [5, 8])
    other = client("B/c0", "B", [3, 4])
    assert identity_key(cam0, 1) == identity_key(cam1, 0)  # pid 5 of domain A
    assert identity_key(cam0, 0) != identity_key(other, 0)  # pid 3 of A is not pid 3 of B
    loose = ClientData(name="X", domain="A", train=cam0.train)  # no source_pids: never pooled
    assert identity_key(loose, 0) not in (identity_key(cam0, 0), identity_key(cam1, 0))


def test_aggregate_averages_model_by_volume_and_centres_by_indicator():
    w = "neck.fc.weight"
    ups = [Upload("c0", {w: torch.tensor([0.0]), "mrb/A/3": torch.tensor([1.0, 0.0]),
                         "mrb/A/5": torch.tensor([0.0, 1.0])}, num_samples=1),
           Upload("c1", {w: torch.tensor([4.0]), "mrb/A/5": torch.tensor([0.0, 3.0])}, num_samples=3)]
    previous = {w: torch.tensor([100.0]), "mrb/A/9": torch.tensor([7.0, 7.0])}
    out = DPPTAggregate().aggregate(previous, ups).global_state
    assert out[w].item() == pytest.approx(3.0)  # Eq. 8: (1*0 + 3*4) / 4
    plain = DataVolumeAverage().aggregate({w: previous[w]}, [Upload(u.client, {w: u.state[w]}, u.num_samples)
                                                             for u in ups]).global_state
    assert torch.equal(out[w], plain[w])
    assert torch.allclose(out["mrb/A/3"], torch.tensor([1.0, 0.0]))
    assert torch.allclose(out["mrb/A/5"], torch.tensor([0.0, 2.0]))  # unweighted over holders (Eq. 5)
    assert torch.allclose(out["mrb/A/9"], torch.tensor([7.0, 7.0]))
    assert set(out) == {w, "mrb/A/3", "mrb/A/5", "mrb/A/9"}


def test_download_keeps_the_clients_own_centres_by_label():
    cam = client("A/c1", "A", [5, 8, 9])
    state = {"neck.fc.weight": torch.ones(1), "mrb/A/5": torch.tensor([1.0, 2.0]),
             "mrb/A/9": torch.tensor([3.0, 4.0]), "mrb/A/3": torch.tensor([9.0, 9.0])}
    received = DPPTAggregate().configure(state, cam, {}, 0)
    assert set(received) == {"neck.fc.weight", "mrb_global_centres", "mrb_global_known"}  # no other centre
    assert received["neck.fc.weight"] is state["neck.fc.weight"]
    assert torch.equal(received["mrb_global_centres"], torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 4.0]]))
    assert torch.equal(received["mrb_global_known"], torch.tensor([True, False, True]))
    model_only = {"neck.fc.weight": torch.ones(1)}
    assert DPPTAggregate().configure(model_only, cam, {}, 1) == model_only  # no centres for this client
