"""FedNova's server update (privreid.federated.methods.fednova) against hand-computed values of its equations."""

from __future__ import annotations

import pytest
import torch

from privreid.federated.methods.fednova import NormalisedAverage, step_norm
from privreid.federated.strategy import DataVolumeAverage, Upload


def _up(name, value, n, steps, extra=None):
    state = {"w": torch.tensor([value]), "bn.num_batches_tracked": torch.tensor(n)} | (extra or {})
    return Upload(name, state, n, {"steps": float(steps)})


def test_updates_are_normalised_by_local_steps():
    """x = 0; client 1: n = 1, 1 step, x_1 = 1; client 2: n = 3, 3 steps, x_2 = 6.  p = (1/4, 3/4), a = (1, 3),
    tau_eff = 1/4 + 9/4 = 5/2, d = (-1, -2): x_new = 0 - 5/2 (-1/4 - 6/4) = 4.375 (FedAvg: 1/4 + 18/4 = 4.75)."""
    uploads = [_up("a", 1.0, 1, 1), _up("b", 6.0, 3, 3)]
    glob = {"w": torch.tensor([0.0]), "bn.num_batches_tracked": torch.tensor(0)}
    out = NormalisedAverage().aggregate(glob, uploads).global_state
    assert out["w"].item() == pytest.approx(4.375)
    assert DataVolumeAverage().aggregate(glob, uploads).global_state["w"].item() == pytest.approx(4.75)
    assert out["bn.num_batches_tracked"].item() == 3  # integers from the client with the most samples


def test_equal_steps_is_fedavg():
    uploads = [_up("a", 1.0, 2, 4), _up("b", -3.0, 6, 4)]
    glob = {"w": torch.tensor([0.5]), "bn.num_batches_tracked": torch.tensor(0)}
    assert NormalisedAverage(0.9).aggregate(glob, uploads).global_state["w"].item() == pytest.approx(
        DataVolumeAverage().aggregate(glob, uploads).global_state["w"].item())


def test_momentum_step_norm_is_the_sum_of_the_step_weights():
    """rho = 0.5, tau = 2: a = (1 - 0.25) / 0.5 + (1 - 0.5) / 0.5 = 1.5 + 1 = 2.5."""
    assert step_norm(2, 0.5) == pytest.approx(2.5)
    assert step_norm(7, 0.0) == 7.0
    rho, tau = 0.9, 5
    assert step_norm(tau, rho) == pytest.approx(sum((1 - rho ** (tau - k)) / (1 - rho) for k in range(tau)))


def test_a_client_without_steps_is_refused():
    up = Upload("a", {"w": torch.tensor([1.0])}, 1, {})
    with pytest.raises(ValueError, match="local steps"):
        NormalisedAverage().aggregate({"w": torch.tensor([0.0])}, [up])


def test_fednova_is_a_registered_method_with_local_classifiers():
    from privreid.federated.registry import get_method

    method = get_method("fednova")
    assert method.policy.is_local("classifier.weight") and not method.policy.is_local("backbone.conv1.weight")
